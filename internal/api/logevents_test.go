package api_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/testlog"
)

// TestRemoteLogEvents: the server writes the OpenTelemetry log events of
// tasks enqueued, claimed and settled over the worker protocol, and of a
// replay over the API — each once, with the task's correlation attributes,
// the started/succeeded/dead-lettered events in the trace of the attempt's
// span (the claim's attempt_traceparent).
func TestRemoteLogEvents(t *testing.T) {
	stores(t, func(t *testing.T, dbURL func(t *testing.T) string) {
		logs, lp := testlog.NewOTel()
		sr := tracetest.NewSpanRecorder()
		b := setup(t, dbURL(t), setupOpts{lib: &backstop.Config{LoggerProvider: lp,
			TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))}})
		ctx := context.Background()
		op := b.as[api.RoleOperator]
		attrs := map[string]string{"run_id": "run-9", "plan_hash": "ph-9"}
		var ids []string
		for range 2 {
			r, err := op.Enqueue(ctx, apiclient.Task{Queue: "rq", Kind: "k", MaxAttempts: 1, Attributes: attrs})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.Task.ID)
		}
		claimed, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"rq"}, WorkerID: "w-remote", Max: 2})
		if err != nil || len(claimed) != 2 {
			t.Fatalf("claim: %v %v", claimed, err)
		}
		tps := map[string]string{}
		for _, c := range claimed {
			tps[c.ID] = c.AttemptTraceParent
			if c.ID == ids[0] {
				_, err = op.Complete(ctx, c.ID, api.CompleteRequest{LeaseToken: c.LeaseToken})
			} else {
				_, err = op.Fail(ctx, c.ID, api.FailRequest{LeaseToken: c.LeaseToken, Outcome: bt.OutcomeTransientError, Error: "boom"})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.as[api.RoleAdmin].Replay(ctx, ids[1], api.ReplayRequest{}); err != nil {
			t.Fatal(err)
		}
		want := map[string]map[string]int{
			ids[0]: {"backstop.task.enqueued": 1, "backstop.task.claimed": 1, "backstop.task.started": 1, "backstop.task.succeeded": 1},
			ids[1]: {"backstop.task.enqueued": 1, "backstop.task.claimed": 1, "backstop.task.started": 1, "backstop.task.dead_lettered": 1,
				"backstop.dlq.replay_requested": 1, "backstop.dlq.replayed": 1},
		}
		for id, names := range want {
			got := logs.EventsOf(id)
			for name, n := range names {
				if len(got[name]) != n {
					t.Errorf("task %s: %d %s events, want %d (all: %v)", id, len(got[name]), name, n, got)
				}
			}
			for name, evs := range got {
				if names[name] == 0 {
					t.Errorf("task %s: unexpected %s events", id, name)
				}
				for _, e := range evs {
					if e.Attrs["event.name"] != name || e.Attrs["queue"] != "rq" || e.Attrs["kind"] != "k" ||
						e.Attrs["run_id"] != "run-9" || e.Attrs["plan_hash"] != "ph-9" {
						t.Errorf("task %s: %s attributes %v", id, name, e.Attrs)
					}
					switch name {
					case "backstop.task.started", "backstop.task.succeeded", "backstop.task.dead_lettered":
						if tp := "00-" + e.TraceID + "-" + e.SpanID + "-01"; tp != tps[id] || e.Attrs["execution_id"] == "" {
							t.Errorf("task %s: %s in %s, want the attempt's span %s (attrs %v)", id, name, tp, tps[id], e.Attrs)
						}
					case "backstop.task.claimed":
						if e.Attrs["worker_id"] != "w-remote" || e.Attrs["attempt"] != "1" {
							t.Errorf("task %s: claimed %v", id, e.Attrs)
						}
					}
				}
			}
		}
	})
}
