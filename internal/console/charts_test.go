package console_test

import (
	"net/http"
	"testing"

	"github.com/backstophq/backstop/internal/api"
)

// succeed enqueues a task in queue (with attrs, if given) and completes its
// attempt as a remote worker.
func (e *env) succeed(t *testing.T, queue string, attrs ...map[string]string) string {
	t.Helper()
	task := map[string]any{"queue": queue, "kind": "k", "payload": map[string]any{}}
	if len(attrs) > 0 {
		task["attributes"] = attrs[0]
	}
	id := e.enqueue(t, task)
	st, out, _ := e.call(t, "POST", "/v1/claim", api.RoleOperator, map[string]any{"queues": []string{queue}, "worker_id": "console-test", "max": 1}, nil)
	tasks, _ := out["tasks"].([]any)
	if st != http.StatusOK || len(tasks) != 1 {
		t.Fatalf("claim: %d %v", st, out)
	}
	ct := tasks[0].(map[string]any)
	if st, out, _ := e.call(t, "POST", "/v1/tasks/"+ct["id"].(string)+"/complete", api.RoleOperator,
		map[string]any{"lease_token": ct["lease_token"]}, nil); st != http.StatusOK {
		t.Fatalf("complete: %d %v", st, out)
	}
	return id
}

// The overview charts the last hour's throughput and failure rate (GET
// /v1/activity, drawn as SVG), labelled for screen readers, and redraws
// them live.
func TestBrowserOverviewCharts(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		e.succeed(t, "ok")
		e.deadLetter(t, map[string]any{"queue": "bad", "kind": "k", "payload": map[string]any{}}, "boom <script>window.__pwned = 1</script>")
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleViewer)
		run(t, ctx, "open the overview", nav(e.url+"/#/"), visible("#chart-throughput"))
		if got := evalJS[string](t, ctx, "throughput", `document.querySelector("#chart-throughput").dataset.total`); got != "1" {
			t.Fatalf("throughput total: %s, want 1", got)
		}
		label := evalJS[string](t, ctx, "failure chart", `(() => { const c = document.querySelector("#chart-failures");
			return c.dataset.failed + "/" + c.dataset.dead + " " + c.getAttribute("aria-label"); })()`)
		if label != "1/1 Failure rate: 50% of 2 finished attempts failed in the last hour (1 failed, 1 dead letters)" {
			t.Fatalf("failure chart: %q", label)
		}
		if n := count(t, ctx, "#chart-throughput rect.bar"); n != 60 {
			t.Fatalf("%d bars, want 60 (a minute each)", n)
		}
		if n := count(t, ctx, "#chart-failures circle.point"); n < 1 {
			t.Fatalf("no failure-rate point")
		}
		assertNothingRan(t, ctx, "overview charts")
		screenshot(t, ctx, "overview-charts")
		// Live: another success redraws the throughput chart.
		e.succeed(t, "ok")
		run(t, ctx, "the chart follows", poll(`document.querySelector("#chart-throughput") && document.querySelector("#chart-throughput").dataset.total === "2"`))
	})
}
