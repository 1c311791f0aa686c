package backstop

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testlog"
	"github.com/backstophq/backstop/internal/testwait"
)

// TestLogEventsInProcess: the in-process worker's tasks write the whole
// OpenTelemetry log event set through Config.LoggerProvider — enqueued,
// claimed, started, succeeded (with its duration), retry_scheduled,
// dead_lettered, and a replay's requested/replayed (failed for a refused
// one) — each once per transition, each with its event name (the record's
// and event.name), the task's correlation attributes and the trace
// context of the span it belongs to.
func TestLogEventsInProcess(t *testing.T) {
	logs, lp := testlog.NewOTel()
	sr := tracetest.NewSpanRecorder()
	forEachStoreClient(t, func() *Config {
		return &Config{LoggerProvider: lp, Retry: &RetryPolicy{Schedule: []bt.Duration{0}},
			TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))}
	}, func(t *testing.T, c *Client) {
		ctx := context.Background()
		q := "ev" + strings.ReplaceAll(t.Name(), "/", "_")
		var replayed atomic.Bool
		w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{q: 2}, PollInterval: 10 * time.Millisecond, MaintenanceInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("ok", HandlerFunc(func(context.Context, *Task) error { return nil }))
		w.Handle("flaky", HandlerFunc(func(_ context.Context, tk *Task) error {
			if tk.Attempt == 1 {
				return errors.New("flaky")
			}
			return nil
		}))
		w.Handle("bad", HandlerFunc(func(context.Context, *Task) error {
			if replayed.Load() {
				return nil
			}
			return errors.New("bad")
		}))
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop(context.Background()) })
		attrs := map[string]string{"run_id": "r-1", "plan_hash": "ph-1", "origin_run_ids": "r-0"}
		enq := func(kind string, max int) string {
			r, err := c.Enqueue(ctx, EnqueueParams{Queue: q, Kind: kind, MaxAttempts: max, Attributes: attrs})
			if err != nil {
				t.Fatal(err)
			}
			return r.Task.ID
		}
		a, b, d := enq("ok", 1), enq("flaky", 2), enq("bad", 1)
		waitState := func(id string, st State) {
			testwait.For(t, id+" "+string(st), func() bool {
				tk, err := c.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				return tk.State == st
			})
		}
		waitState(a, StateSucceeded)
		waitState(b, StateSucceeded)
		waitState(d, StateDead)
		replayed.Store(true)
		if _, err := c.Replay(ctx, ReplayParams{ID: d}); err != nil {
			t.Fatal(err)
		}
		waitState(d, StateSucceeded)
		missing := "missing-" + q
		if _, err := c.Replay(ctx, ReplayParams{ID: missing}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("replay of an unknown id: %v", err)
		}

		want := map[string]map[string]int{
			a: {"backstop.task.enqueued": 1, "backstop.task.claimed": 1, "backstop.task.started": 1, "backstop.task.succeeded": 1},
			b: {"backstop.task.enqueued": 1, "backstop.task.claimed": 2, "backstop.task.started": 2, "backstop.task.retry_scheduled": 1,
				"backstop.task.succeeded": 1},
			d: {"backstop.task.enqueued": 1, "backstop.task.claimed": 2, "backstop.task.started": 2, "backstop.task.dead_lettered": 1,
				"backstop.dlq.replay_requested": 1, "backstop.dlq.replayed": 1, "backstop.task.succeeded": 1},
		}
		// The events of a settlement are written once its batch committed:
		// shortly after the state reads settled.
		testwait.For(t, "every task's events", func() bool {
			for id, names := range want {
				got := logs.EventsOf(id)
				for name, n := range names {
					if len(got[name]) < n {
						return false
					}
				}
			}
			return true
		})
		spans := map[string]sdktrace.ReadOnlySpan{} // by execution id, and "send "+task id
		for _, sp := range sr.Ended() {
			for _, kv := range sp.Attributes() {
				switch kv.Key {
				case "backstop.execution_id":
					spans[kv.Value.AsString()] = sp
				case "messaging.message.id":
					if strings.HasPrefix(sp.Name(), "send ") {
						spans["send "+kv.Value.AsString()] = sp
					}
				}
			}
		}
		for id, names := range want {
			got := logs.EventsOf(id)
			for name, n := range names {
				if len(got[name]) != n {
					t.Errorf("task %s: %d %s events, want %d", id, len(got[name]), name, n)
				}
			}
			for name, evs := range got {
				if names[name] == 0 {
					t.Errorf("task %s: unexpected %s events %v", id, name, evs)
				}
				for _, e := range evs {
					if e.Attrs["event.name"] != name || e.Attrs["queue"] != q || e.Attrs["kind"] == "" ||
						e.Attrs["run_id"] != "r-1" || e.Attrs["plan_hash"] != "ph-1" || e.Attrs["origin_run_ids"] != "r-0" {
						t.Errorf("task %s: %s attributes %v", id, name, e.Attrs)
					}
					switch name {
					case "backstop.task.enqueued":
						s := spans["send "+id]
						if s == nil || e.SpanID != s.SpanContext().SpanID().String() || e.Attrs["attempts"] != "0" || e.Attrs["max_attempts"] == "" {
							t.Errorf("task %s: enqueued %+v, want the send span's context, attempts and max_attempts", id, e)
						}
					case "backstop.task.claimed", "backstop.task.started", "backstop.task.succeeded", "backstop.task.retry_scheduled",
						"backstop.task.dead_lettered":
						if e.Attrs["execution_id"] == "" || e.Attrs["attempt"] == "" {
							t.Errorf("task %s: %s without its attempt: %v", id, name, e.Attrs)
						}
						if name == "backstop.task.claimed" {
							if e.Attrs["worker_id"] != w.ID() || e.TraceID != spans["send "+id].SpanContext().TraceID().String() {
								t.Errorf("task %s: claimed %+v", id, e)
							}
							continue
						}
						s := spans[e.Attrs["execution_id"]]
						if s == nil || e.SpanID != s.SpanContext().SpanID().String() || e.TraceID != s.SpanContext().TraceID().String() {
							t.Errorf("task %s: %s not in its attempt's span: %+v", id, name, e)
						}
						if name == "backstop.task.succeeded" && e.Attrs["duration_seconds"] == "" {
							t.Errorf("task %s: succeeded without duration_seconds: %v", id, e.Attrs)
						}
						if name == "backstop.task.dead_lettered" && (e.Attrs["reason"] != "attempts_exhausted" || e.SeverityText != "WARN") {
							t.Errorf("task %s: dead letter %+v", id, e)
						}
					}
				}
			}
		}
		failed := logs.EventsOf(missing)
		if len(failed["backstop.dlq.replay_requested"]) != 1 || len(failed["backstop.dlq.replay_failed"]) != 1 ||
			!strings.Contains(failed["backstop.dlq.replay_failed"][0].Attrs["error"], "not found") {
			t.Errorf("refused replay: %v", failed)
		}
	})
}

// TestLogEventsWorkflowSteps: a workflow's step tasks, enqueued by the
// run's plans, write their enqueued event once the plan committed, with
// the run's run_id and plan_hash, and the rest of their events as any task.
func TestLogEventsWorkflowSteps(t *testing.T) {
	logs, lp := testlog.NewOTel()
	forEachStoreClient(t, func() *Config { return &Config{LoggerProvider: lp} }, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v := applyYAML(t, c, "name: evwf\nqueue: wf\nsteps:\n  - {id: a, kind: ok}\n  - {id: b, kind: ok, needs: [a]}\n")
		startWorker(t, c, map[string]Handler{"ok": okHandler()})
		run, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "evwf", Input: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		waitRun(t, c, run.RunID, "succeeded")
		for _, step := range []string{"a", "b"} {
			id := run.RunID + "." + step
			testwait.For(t, id+"'s succeeded event", func() bool { return len(logs.EventsOf(id)["backstop.task.succeeded"]) == 1 })
			got := logs.EventsOf(id)
			for _, name := range []string{"backstop.task.enqueued", "backstop.task.claimed", "backstop.task.started", "backstop.task.succeeded"} {
				if len(got[name]) != 1 {
					t.Errorf("step %s: %d %s events, want 1", step, len(got[name]), name)
					continue
				}
				if a := got[name][0].Attrs; a["run_id"] != run.RunID || a["plan_hash"] != v.PlanHash || a["queue"] != "wf" {
					t.Errorf("step %s: %s attributes %v", step, name, a)
				}
			}
		}
	})
}

// TestLogEventsReleasedOnShutdown: an attempt released when its worker
// stops (the grace ran out) ends with a released event, so every claimed
// attempt has an end in the log.
func TestLogEventsReleasedOnShutdown(t *testing.T) {
	logs, lp := testlog.NewOTel()
	forEachStoreClient(t, func() *Config { return &Config{LoggerProvider: lp} }, func(t *testing.T, c *Client) {
		ctx := context.Background()
		q := "rel" + strings.ReplaceAll(t.Name(), "/", "_")
		w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{q: 1}, PollInterval: 10 * time.Millisecond, MaintenanceInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("block", HandlerFunc(func(ctx context.Context, _ *Task) error {
			<-ctx.Done()
			return ctx.Err()
		}))
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		r, err := c.Enqueue(ctx, EnqueueParams{Queue: q, Kind: "block", Attributes: map[string]string{"plan_hash": "ph-r"}})
		if err != nil {
			t.Fatal(err)
		}
		id := r.Task.ID
		testwait.For(t, "the attempt to start", func() bool { return len(logs.EventsOf(id)["backstop.task.started"]) == 1 })
		stopCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_ = w.Stop(stopCtx)
		got := logs.EventsOf(id)
		rel := got["backstop.task.released"]
		if len(rel) != 1 || rel[0].Attrs["execution_id"] != got["backstop.task.started"][0].Attrs["execution_id"] ||
			rel[0].Attrs["plan_hash"] != "ph-r" || rel[0].Attrs["outcome"] != "released" {
			t.Fatalf("released events %v (all: %v)", rel, got)
		}
	})
}
