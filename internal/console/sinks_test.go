package console_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/store"
)

// The overview's Sinks section: each sink's undelivered messages, how
// long the oldest waited, its dead messages linked to the DLQ filtered to
// the sink's queue, and the newest error (markup shown as text); and each
// ingester's lag behind its broker.
func TestBrowserOverviewSinks(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		bg := context.Background()
		const refusal = `nats: maximum payload exceeded <img src=x onerror="window.__pwned = 7">`
		if _, err := e.lib.Publish(bg,
			backstop.Message{Sink: "bus", Topic: "orders.created", Key: "o-1", Payload: []byte(`{"n":1}`)},
			backstop.Message{Sink: "bus", Topic: "orders.created", Key: "o-2", Payload: []byte(`{"n":2}`)},
			backstop.Message{Sink: "log", Topic: "audit", Payload: []byte(`{"n":3}`)}); err != nil {
			t.Fatal(err)
		}
		// One of bus's messages is refused for good by its broker: a
		// relay (here a remote worker on the sink's queue) fails it.
		st, out, _ := e.call(t, "POST", "/v1/claim", api.RoleOperator, map[string]any{"queues": []string{"sink.bus"}, "worker_id": "relay-test", "max": 1}, nil)
		if st != http.StatusOK || len(out["tasks"].([]any)) != 1 {
			t.Fatalf("claim: %d %v", st, out)
		}
		ct := out["tasks"].([]any)[0].(map[string]any)
		if st, out, _ := e.call(t, "POST", "/v1/tasks/"+ct["id"].(string)+"/fail", api.RoleOperator,
			map[string]any{"lease_token": ct["lease_token"], "outcome": "permanent_error", "error": refusal}, nil); st != http.StatusOK {
			t.Fatalf("fail: %d %v", st, out)
		}
		e.clock.Advance(90 * time.Second)
		from := e.clock.Now().Add(-2 * time.Minute)
		if err := e.store.SaveIngestPosition(bg, store.IngestPosition{Group: "g", Topic: "uptime", Queue: "results", Holder: "ing",
			LagMessages: 42, LagFrom: &from, UpdatedAt: e.clock.Now()}); err != nil {
			t.Fatal(err)
		}

		ctx := browser(t)
		e.signIn(t, ctx, api.RoleViewer)
		run(t, ctx, "the overview's sinks", visible(`#sinks tr[data-sink="bus"]`))
		if s := text(t, ctx, `#sinks tr[data-sink="bus"] .pending`); s != "1" {
			t.Fatalf("bus pending %q, want 1", s)
		}
		if s := text(t, ctx, `#sinks tr[data-sink="bus"] .dead`); s != "1" {
			t.Fatalf("bus dead %q, want 1", s)
		}
		if s := text(t, ctx, `#sinks tr[data-sink="bus"] .error`); s != refusal {
			t.Fatalf("bus last error %q, want the broker's refusal as text", s)
		}
		if s := text(t, ctx, `#sinks tr[data-sink="bus"] .lag`); !contains(s, "1m 3") {
			t.Fatalf("bus lag %q, want about 1m 30s", s)
		}
		if s := text(t, ctx, `#sinks tr[data-sink="log"] .pending`); s != "1" {
			t.Fatalf("log pending %q, want 1", s)
		}
		if s := text(t, ctx, `#sinks tr[data-sink="log"] .dead`) + text(t, ctx, `#sinks tr[data-sink="log"] .error`); s != "0—" {
			t.Fatalf("log dead and error %q, want 0 and none", s)
		}
		if s := text(t, ctx, `#sinks tr[data-ingest="g/uptime"] .behind`) + " " + text(t, ctx, `#sinks tr[data-ingest="g/uptime"] .lag`); !contains(s, "42 2m") {
			t.Fatalf("the ingester's lag %q, want 42 messages and 2m", s)
		}
		if evalJS[bool](t, ctx, "no script ran", `window.__pwned === 7`) {
			t.Fatal("the error's markup ran")
		}
		run(t, ctx, "open bus's dead messages", click(`#sinks tr[data-sink="bus"] a.dead`), visible("#dlq-list"))
		waitID(t, ctx, "#dlq-list", ct["id"].(string))
		if q := evalJS[string](t, ctx, "the DLQ's queue filter", `document.querySelector("#f-queue").value`); q != "sink.bus" {
			t.Fatalf("the DLQ is filtered to %q, want sink.bus", q)
		}
	})
}
