package backstop

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/telemetry"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/workflow"
)

// A workflow run is one trace: its root span `run <workflow>` (recorded
// when the run stops, with the ids derived from the run id), a dispatch
// span per step under it, each attempt's process span under its step's.

const threeStepYAML = `
name: three
queue: wf
steps:
  - {id: a, kind: ok}
  - {id: b, kind: ok, needs: [a]}
  - {id: c, kind: ok, needs: [b]}
`

func okHandler() Handler {
	return HandlerFunc(func(ctx context.Context, t *Task) error { return nil })
}

// tracedClients runs fn on both stores with clients recording their spans
// in the recorder fn gets, through sampler (nil: always sample) and the
// binary's error-keeping processor.
func tracedClients(t *testing.T, sampler sdktrace.Sampler, fn func(t *testing.T, c *Client, sr *tracetest.SpanRecorder)) {
	var mu sync.Mutex
	recs := map[trace.TracerProvider]*tracetest.SpanRecorder{}
	forEachStoreClient(t, func() *Config {
		sr := tracetest.NewSpanRecorder()
		opts := []sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(telemetry.ErrorKeeping(sr)),
			sdktrace.WithIDGenerator(TraceIDGenerator())}
		if sampler != nil {
			opts = append(opts, sdktrace.WithSampler(sampler))
		}
		cfg := &Config{TracerProvider: sdktrace.NewTracerProvider(opts...)}
		mu.Lock()
		recs[cfg.TracerProvider] = sr
		mu.Unlock()
		return cfg
	}, func(t *testing.T, c *Client) {
		mu.Lock()
		sr := recs[c.cfg.TracerProvider]
		mu.Unlock()
		fn(t, c, sr)
	})
}

// rootSpan waits for run runID's root span.
func rootSpan(t *testing.T, sr *tracetest.SpanRecorder, runID string) sdktrace.ReadOnlySpan {
	t.Helper()
	var root sdktrace.ReadOnlySpan
	testwait.For(t, "the run's root span", func() bool {
		for _, s := range sr.Ended() {
			if strings.HasPrefix(s.Name(), "run ") && spanAttr(s, "run_id") == runID {
				root = s
				return true
			}
		}
		return false
	})
	return root
}

func TestRunIsOneTrace(t *testing.T) {
	t.Parallel()
	tracedClients(t, nil, func(t *testing.T, c *Client, sr *tracetest.SpanRecorder) {
		v := applyYAML(t, c, threeStepYAML)
		startWorker(t, c, map[string]Handler{"ok": okHandler()})
		run, err := c.RunWorkflow(context.Background(), RunWorkflowParams{Workflow: "three"})
		if err != nil {
			t.Fatal(err)
		}
		waitRun(t, c, run.RunID, workflow.RunSucceeded)
		root := rootSpan(t, sr, run.RunID)
		want := engine.RunSpanContext(run.RunID)
		if root.SpanContext().TraceID() != want.TraceID() || root.SpanContext().SpanID() != want.SpanID() || root.Parent().IsValid() {
			t.Fatalf("root span %v parent %v, want the run's ids %v and no parent", root.SpanContext(), root.Parent(), want)
		}
		for k, w := range map[string]string{"workflow": "three", "workflow.version": fmt.Sprint(v.Version),
			"plan_hash": v.PlanHash, "backstop.run.state": "succeeded"} {
			if got := spanAttr(root, k); got != w {
				t.Errorf("root %s = %q, want %q", k, got, w)
			}
		}
		dispatch := map[string]sdktrace.ReadOnlySpan{} // task id -> span
		var process []sdktrace.ReadOnlySpan
		for _, s := range sr.Ended() {
			if s.SpanContext().TraceID() != want.TraceID() {
				t.Errorf("span %s is in trace %s, not the run's", s.Name(), s.SpanContext().TraceID())
			}
			switch {
			case strings.HasPrefix(s.Name(), "dispatch "):
				if s.Parent().SpanID() != want.SpanID() {
					t.Errorf("%s: parent %s, want the root", s.Name(), s.Parent().SpanID())
				}
				dispatch[spanAttr(s, "messaging.message.id")] = s
			case strings.HasPrefix(s.Name(), "process "):
				process = append(process, s)
			}
		}
		if len(dispatch) != 3 || len(process) != 3 {
			t.Fatalf("%d dispatch and %d process spans, want 3 each", len(dispatch), len(process))
		}
		for _, p := range process {
			d := dispatch[spanAttr(p, "messaging.message.id")]
			if d == nil || p.Parent().SpanID() != d.SpanContext().SpanID() {
				t.Errorf("process span of %s: parent %s, not its step's dispatch span", spanAttr(p, "messaging.message.id"), p.Parent().SpanID())
			}
		}
		if root.StartTime().After(dispatch[run.RunID+".a"].StartTime()) || root.EndTime().Before(process[len(process)-1].EndTime().Add(-1)) {
			t.Errorf("root %v..%v does not span its steps", root.StartTime(), root.EndTime())
		}
	})
}

// A saga's compensations are spans of the run's trace too, and a run that
// rolled back ends its root in error.
func TestRunTraceCompensated(t *testing.T) {
	t.Parallel()
	tracedClients(t, nil, func(t *testing.T, c *Client, sr *tracetest.SpanRecorder) {
		applyYAML(t, c, fmt.Sprintf(sagaYAML, "on_fail"))
		var ran sync.Map
		startWorker(t, c, sagaHandlers(&ran))
		run, err := c.RunWorkflow(context.Background(), RunWorkflowParams{Workflow: "order", Input: json.RawMessage(`{"card":"bad"}`)})
		if err != nil {
			t.Fatal(err)
		}
		waitRun(t, c, run.RunID, workflow.RunCompensated)
		root := rootSpan(t, sr, run.RunID)
		if root.Status().Code != codes.Error || spanAttr(root, "backstop.run.state") != "compensated" {
			t.Errorf("root: status %v state %q", root.Status(), spanAttr(root, "backstop.run.state"))
		}
		var comp sdktrace.ReadOnlySpan
		for _, s := range sr.Ended() {
			if s.Name() == "compensate undo_reserve" {
				comp = s
			}
		}
		if comp == nil || comp.Parent().SpanID() != root.SpanContext().SpanID() || spanAttr(comp, "compensation_of") != "reserve" {
			t.Fatalf("compensation span %v", comp)
		}
	})
}

// Sampling: at ratio 0 a run is not traced, unless started with Trace
// (every span of it then is); a task enqueued with Trace likewise.
func TestRunTraceForced(t *testing.T) {
	t.Parallel()
	tracedClients(t, telemetry.Sampler(0), func(t *testing.T, c *Client, sr *tracetest.SpanRecorder) {
		applyYAML(t, c, threeStepYAML)
		startWorker(t, c, map[string]Handler{"ok": okHandler(), "plain": okHandler()})
		ctx := context.Background()
		quiet, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "three"})
		if err != nil {
			t.Fatal(err)
		}
		waitRun(t, c, quiet.RunID, workflow.RunSucceeded)
		forced, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "three", Trace: true})
		if err != nil {
			t.Fatal(err)
		}
		waitRun(t, c, forced.RunID, workflow.RunSucceeded)
		root := rootSpan(t, sr, forced.RunID)
		res, err := c.Enqueue(ctx, EnqueueParams{Queue: "wf", Kind: "plain", Trace: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Enqueue(ctx, EnqueueParams{Queue: "wf", Kind: "plain", ID: "untraced"}); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, "the forced task's attempt span", func() bool {
			for _, s := range sr.Ended() {
				if s.Name() == "process wf" && spanAttr(s, "messaging.message.id") == res.Task.ID {
					return true
				}
			}
			return false
		})
		names := map[string]int{}
		for _, s := range sr.Ended() {
			id := spanAttr(s, "messaging.message.id")
			if spanAttr(s, "run_id") == quiet.RunID || strings.HasPrefix(id, quiet.RunID) || id == "untraced" {
				t.Errorf("span %s of an unforced run or task was sampled", s.Name())
			}
			if s.SpanContext().TraceID() == root.SpanContext().TraceID() {
				names[strings.Fields(s.Name())[0]]++
			}
		}
		if names["run"] != 1 || names["dispatch"] != 3 || names["process"] != 3 {
			t.Errorf("forced run's spans: %v, want 1 run, 3 dispatch, 3 process", names)
		}
	})
}

// TestRunTraceWhenSpans: each when evaluation that decided a step is a
// span `when <step>` under the run's root, with its result; an error is
// status Error.
func TestRunTraceWhenSpans(t *testing.T) {
	t.Parallel()
	tracedClients(t, nil, func(t *testing.T, c *Client, sr *tracetest.SpanRecorder) {
		applyYAML(t, c, `
name: whens
queue: wf
steps:
  - {id: a, kind: ok}
  - {id: yes, kind: ok, needs: [a], when: input.go == true}
  - {id: no, kind: ok, needs: [a], when: input.go == false}
  - {id: bad, kind: ok, when: input.nope.x == 1, on_when_error: treat_as_false}
`)
		startWorker(t, c, map[string]Handler{"ok": okHandler()})
		run, err := c.RunWorkflow(context.Background(), RunWorkflowParams{Workflow: "whens", Input: json.RawMessage(`{"go":true}`)})
		if err != nil {
			t.Fatal(err)
		}
		waitRun(t, c, run.RunID, workflow.RunSucceeded)
		rootSpan(t, sr, run.RunID)
		want := engine.RunSpanContext(run.RunID)
		got := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range sr.Ended() {
			if strings.HasPrefix(s.Name(), "when ") && spanAttr(s, "run_id") == run.RunID {
				if got[s.Name()] != nil {
					t.Errorf("two spans %s", s.Name())
				}
				got[s.Name()] = s
			}
		}
		for step, result := range map[string]string{"yes": "true", "no": "false", "bad": "error"} {
			s := got["when "+step]
			if s == nil {
				t.Errorf("no span for %s's when (spans: %v)", step, got)
				continue
			}
			if spanAttr(s, "backstop.when.result") != result || spanAttr(s, "step_id") != step || spanAttr(s, "workflow") != "whens" ||
				s.Parent().SpanID() != want.SpanID() || s.SpanContext().TraceID() != want.TraceID() {
				t.Errorf("when %s: result %q parent %v", step, spanAttr(s, "backstop.when.result"), s.Parent())
			}
			if (result == "error") != (s.Status().Code == codes.Error) {
				t.Errorf("when %s: status %v", step, s.Status())
			}
		}
		if len(got) != 3 {
			t.Errorf("%d when spans, want 3", len(got))
		}
	})
}
