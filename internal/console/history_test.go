package console_test

import (
	"context"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/maintenance"
)

// The overview charts the history beyond the hour (throughput, failure
// rate, wait and run latency over 24 h, or 7 d by the toggle) from the
// activity rollup a maintenance pass wrote, with a table by queue and kind
// whose queues link to the queue's page, which charts that queue alone.
func TestBrowserHistoryCharts(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		e.succeed(t, "ok")
		e.succeed(t, "ok")
		e.deadLetter(t, map[string]any{"queue": "bad", "kind": "k", "payload": map[string]any{}}, "boom <script>window.__pwned = 1</script>")
		e.clock.Advance(maintenance.ActivitySettle + time.Second)
		if err := backstop.Maintain(context.Background(), e.lib); err != nil {
			t.Fatal(err)
		}
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleViewer)
		run(t, ctx, "open the overview", nav(e.url+"/#/"), visible("#history-throughput"))
		got := evalJS[string](t, ctx, "24 h charts", `(() => { const c = document.querySelector("#history-throughput");
			return document.querySelector("#history").dataset.window + " " + c.dataset.points + " " + c.dataset.total + "/" + c.dataset.failed; })()`)
		if got != "24h 288 2/1" {
			t.Fatalf("24 h throughput: %q, want 24h 288 2/1", got)
		}
		if n := count(t, ctx, "#history-throughput rect.bar"); n < 2 {
			t.Fatalf("%d bars, want a success and a failure bar at least", n)
		}
		label := evalJS[string](t, ctx, "failure chart", `document.querySelector("#history-failures").getAttribute("aria-label")`)
		if label != "Failure rate over 24h: 33.3% of 3 finished attempts failed (1 failed, 0 retried, 1 dead letters)" {
			t.Fatalf("failure chart: %q", label)
		}
		if run := evalJS[string](t, ctx, "latency", `document.querySelector("#history-latency").dataset.runP50`); run == "" {
			t.Fatal("latency chart: no run p50")
		}
		if n := count(t, ctx, "#history-latency circle"); n < 2 {
			t.Fatalf("latency chart: %d points, want wait and run points", n)
		}
		if n := count(t, ctx, "#history-groups tbody tr"); n != 2 {
			t.Fatalf("%d queue × kind rows, want 2 (ok/k, bad/k)", n)
		}
		assertNothingRan(t, ctx, "history charts")
		screenshot(t, ctx, "overview-history")

		run(t, ctx, "show 7 days", click("#history-7d"),
			poll(`document.querySelector("#history") && document.querySelector("#history").dataset.window === "7d"`))
		if got := evalJS[string](t, ctx, "7 d throughput", `(() => { const c = document.querySelector("#history-throughput");
			return c.dataset.points + " " + c.dataset.total + " " + document.querySelector("#history-7d").getAttribute("aria-pressed"); })()`); got != "168 2 true" {
			t.Fatalf("7 d throughput: %q, want 168 2 true", got)
		}

		// The queue's page: its history alone (the window chosen stays).
		run(t, ctx, "open the queue ok", click(`#history-groups a[href="#/queues/ok"]`),
			poll(`location.hash === "#/queues/ok" && !!document.querySelector("#history-throughput")`))
		if got := evalJS[string](t, ctx, "queue history", `(() => { const c = document.querySelector("#history-throughput");
			return document.querySelector("#history").dataset.window + " " + c.dataset.total + "/" + c.dataset.failed + " " +
				document.querySelectorAll("#history-groups tbody tr").length + " " + document.querySelector("#queue-counts").textContent; })()`); got != "7d 2/0 1 2 succeeded" {
			t.Fatalf("queue ok: %q, want 7d 2/0 1 2 succeeded", got)
		}
		run(t, ctx, "back to 24 hours", click("#history-24h"),
			poll(`document.querySelector("#history").dataset.window === "24h" && document.querySelector("#history-throughput").dataset.points === "288"`))
		screenshot(t, ctx, "queue-history")
	})
}
