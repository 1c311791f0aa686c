package backstop

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/telemetry"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
	"github.com/jackc/pgx/v5"
)

// The batch start (runs_batch.go) on a real SQLite file and a real
// Postgres server.

const (
	batchOne = "name: bone\nqueue: wf\nsteps:\n  - {id: a, kind: k}\n  - {id: b, kind: k, needs: [a]}\n"
	batchTwo = "name: btwo\nqueue: wf\nsteps:\n  - {id: x, kind: k}\n  - {id: y, kind: k}\n"
)

// TestRunWorkflowsStartsEveryRun: a batch of mixed workflows and versions
// (a version named, the latest, 100 runs past the Postgres pipeline's
// bound) starts every run with its first steps' tasks and its events,
// answered in order; the runs run.
func TestRunWorkflowsStartsEveryRun(t *testing.T) {
	forEachWorkflowStore(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		v1 := applyYAML(t, c, batchOne)
		v2 := applyYAML(t, c, batchOne+"  - {id: c, kind: k, needs: [b]}\n")
		two := applyYAML(t, c, batchTwo)
		var ps []RunWorkflowParams
		for i := range 100 {
			switch i % 3 {
			case 0:
				ps = append(ps, RunWorkflowParams{Workflow: "bone", RunID: fmt.Sprintf("bat-%03d", i), Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
			case 1:
				ps = append(ps, RunWorkflowParams{Workflow: "bone", Version: 1})
			default:
				ps = append(ps, RunWorkflowParams{Workflow: "btwo", Trace: true})
			}
		}
		got, err := c.RunWorkflows(ctx, ps)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(ps) {
			t.Fatalf("%d answers for %d runs", len(got), len(ps))
		}
		for i, r := range got {
			want := map[int]WorkflowVersion{0: v2, 1: v1, 2: two}[i%3]
			if r.Workflow != want.Name || r.Version != want.Version || r.PlanHash != want.PlanHash || r.State != workflow.RunRunning {
				t.Fatalf("run %d: %+v; want %s version %d", i, r, want.Name, want.Version)
			}
			if ps[i].RunID != "" && r.RunID != ps[i].RunID {
				t.Fatalf("run %d: id %s; want %s", i, r.RunID, ps[i].RunID)
			}
		}
		// Each run is stored with its first steps' tasks and its story.
		for _, i := range []int{0, 1, 2, 99} {
			r := got[i]
			run, err := c.WorkflowRun(ctx, r.RunID)
			if err != nil || run.Version != r.Version {
				t.Fatalf("run %d (%s): %+v %v", i, r.RunID, run, err)
			}
			first := map[string][]string{"bone": {"a"}, "btwo": {"x", "y"}}[r.Workflow]
			for _, st := range first {
				if tk, err := c.Get(ctx, r.RunID+"."+st); err != nil || tk.State != StatePending {
					t.Fatalf("run %d's step %s: %+v %v", i, st, tk, err)
				}
			}
			// The gap-free log serves an event once every earlier
			// transaction settled (on Postgres, the cluster's): read until
			// it does.
			var types []string
			testwait.For(t, fmt.Sprintf("run %d's run.started and step.enqueued", i), func() bool {
				page, err := c.ReadEvents(ctx, ReadEventsParams{Stream: "run." + r.RunID, Limit: 100})
				if err != nil {
					t.Fatal(err)
				}
				types = types[:0]
				for _, e := range page.Events {
					types = append(types, e.Type)
				}
				return slices.Contains(types, "run.started") && slices.Contains(types, "step.enqueued")
			})
		}
		run, err := c.WorkflowRun(ctx, "bat-003")
		if err != nil || string(run.Input) != `{"i":3}` {
			t.Fatalf("bat-003: %+v %v; want the input {\"i\":3}", run, err)
		}
		startWorker(t, c, map[string]Handler{"k": HandlerFunc(func(context.Context, *Task) error { return nil })})
		for _, r := range []RunStarted{got[0], got[1], got[2]} {
			waitRun(t, c, r.RunID, workflow.RunSucceeded)
		}
	})
}

// TestRunWorkflowsAllOrNothing: a batch with one bad item (its input, its
// run id, its workflow, its version, a run id twice, a run id that
// exists) names that item's index and writes nothing of the batch.
func TestRunWorkflowsAllOrNothing(t *testing.T) {
	forEachWorkflowStore(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		applyYAML(t, c, batchOne)
		if _, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "bone", RunID: "taken"}); err != nil {
			t.Fatal(err)
		}
		good := func(id string) RunWorkflowParams { return RunWorkflowParams{Workflow: "bone", RunID: id} }
		for _, tc := range []struct {
			name  string
			bad   RunWorkflowParams
			is    error
			field string
			text  string
		}{
			{"input", RunWorkflowParams{Workflow: "bone", RunID: "x-2", Input: json.RawMessage(`{`)}, ErrInvalid, "input", ""},
			{"run id", RunWorkflowParams{Workflow: "bone", RunID: "has.dot"}, ErrInvalid, "run_id", ""},
			{"workflow name", RunWorkflowParams{Workflow: "bad name!", RunID: "x-2"}, ErrInvalid, "workflow", ""},
			{"negative version", RunWorkflowParams{Workflow: "bone", Version: -1, RunID: "x-2"}, ErrInvalid, "version", ""},
			{"twice", good("x-0"), ErrInvalid, "run_id", "also run 1"},
			{"unknown workflow", RunWorkflowParams{Workflow: "nope", RunID: "x-2"}, ErrNotFound, "", "not registered"},
			{"unknown version", RunWorkflowParams{Workflow: "bone", Version: 9, RunID: "x-2"}, ErrNotFound, "", "no version 9"},
			{"exists", good("taken"), ErrConflict, "", `"taken" already exists`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ps := []RunWorkflowParams{good("x-0"), good("x-1"), tc.bad, good("x-3")}
				_, err := c.RunWorkflows(ctx, ps)
				var be *BatchError
				if !errors.As(err, &be) || be.Index != 2 || !errors.Is(err, tc.is) {
					t.Fatalf("error %v; want a BatchError at index 2 wrapping %v", err, tc.is)
				}
				if !strings.Contains(err.Error(), "run 3 of the batch") || !strings.Contains(err.Error(), tc.text) {
					t.Fatalf("error %q does not name run 3 and %q", err, tc.text)
				}
				var ve *ValidationError
				if tc.field != "" && (!errors.As(err, &ve) || ve.Field != tc.field) {
					t.Fatalf("error %v; want a ValidationError of %s", err, tc.field)
				}
				for _, id := range []string{"x-0", "x-1", "x-2", "x-3"} {
					if _, err := c.WorkflowRun(ctx, id); !errors.Is(err, ErrNotFound) {
						t.Fatalf("run %s after the failed batch: %v; want not found", id, err)
					}
					if _, err := c.Get(ctx, id+".a"); !errors.Is(err, ErrNotFound) {
						t.Fatalf("task %s.a after the failed batch: %v; want not found", id, err)
					}
				}
			})
		}
		// The same batch sent twice: the second is the conflict, the first
		// run's id named, nothing more written.
		ps := []RunWorkflowParams{good("again-0"), good("again-1")}
		if _, err := c.RunWorkflows(ctx, ps); err != nil {
			t.Fatal(err)
		}
		_, err := c.RunWorkflows(ctx, append(ps, good("again-2")))
		var be *BatchError
		if !errors.As(err, &be) || be.Index != 0 || !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), `"again-0" already exists`) {
			t.Fatalf("the batch again: %v; want a conflict naming again-0 at index 0", err)
		}
		if _, err := c.WorkflowRun(ctx, "again-2"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("again-2 after the refused batch: %v; want not found", err)
		}
		// A batch past the Postgres pipeline's bound (its runs written by
		// one statement that skips a taken id): the taken run is named.
		big := make([]RunWorkflowParams, 100)
		for i := range big {
			big[i] = good(fmt.Sprintf("big-%d", i))
		}
		big[70] = good("again-1")
		_, err = c.RunWorkflows(ctx, big)
		if !errors.As(err, &be) || be.Index != 70 || !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), `"again-1" already exists`) {
			t.Fatalf("a big batch with a taken id: %v; want a conflict naming again-1 at index 70", err)
		}
		if _, err := c.WorkflowRun(ctx, "big-0"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("big-0 after the refused batch: %v; want not found", err)
		}
		if got, err := c.RunWorkflows(ctx, nil); got != nil || err != nil {
			t.Fatalf("empty batch: %v %v", got, err)
		}
	})
}

// TestRunWorkflowsStaleVersion: a batch start of the latest version whose
// version is superseded between its plan and its write (by another
// process) plans again from the newer one; every run of the batch is of
// the version that was the latest at the write.
func TestRunWorkflowsStaleVersion(t *testing.T) {
	forEachWorkflowStore(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		other, err := NewClient(c.store, nil)
		if err != nil {
			t.Fatal(err)
		}
		v1 := applyYAML(t, c, batchOne)
		// 3 runs, and 100 (past the Postgres pipeline's bound).
		for round, n := range []int{3, 100} {
			// The cache holds the latest version; another process
			// registers a new one while the batch's first plan is made.
			latest := v1
			if round > 0 {
				latest = applyYAML(t, c, batchOne)
			}
			c.e.RememberLatest(&latest)
			plans := 0
			var newer WorkflowVersion
			plan := func(runID string) func(d *WorkflowVersion, def *workflow.Definition) (workflow.Plan, error) {
				return func(d *WorkflowVersion, def *workflow.Definition) (workflow.Plan, error) {
					plans++
					if plans == 1 {
						newer = applyYAML(t, other, strings.Replace(batchOne, "kind: k}", "kind: k2}", 1))
					}
					return c.planStart(def, d, runID, json.RawMessage(`{}`))
				}
			}
			starts := make([]engine.RunStart, n)
			for i := range starts {
				starts[i] = engine.RunStart{Workflow: "bone", Plan: plan(fmt.Sprintf("st%d-%d", round, i))}
			}
			starts[n-1].Version = 1
			var eff engine.RunEffects
			ds, _, err := c.e.StartRuns(ctx, starts, &eff)
			if err != nil {
				t.Fatal(err)
			}
			if plans != 2*n {
				t.Fatalf("%d runs: planned %d times; want the batch planned twice (%d)", n, plans, 2*n)
			}
			for _, i := range []int{0, n - 2, n - 1} {
				want := newer
				if i == n-1 {
					want = v1
				}
				run, err := c.WorkflowRun(ctx, fmt.Sprintf("st%d-%d", round, i))
				if err != nil {
					t.Fatal(err)
				}
				if ds[i].Version != want.Version || run.Version != want.Version || run.PlanHash != want.PlanHash {
					t.Fatalf("%d runs, run %d: answered version %d, stored %d (%s); want %d (%s)", n, i, ds[i].Version, run.Version, run.PlanHash, want.Version, want.PlanHash)
				}
			}
		}
	})
}

// TestRunWorkflowsTx: a batch started in the caller's own transaction
// (pgx.Tx on Postgres, *sql.Tx on SQLite) exists if and only if the caller
// commits; a failing batch leaves the caller's transaction to roll back.
func TestRunWorkflowsTx(t *testing.T) {
	forEachWorkflowStore(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		applyYAML(t, c, batchOne)
		start := func(prefix string, n int, commit bool) ([]RunStarted, error) {
			t.Helper()
			ps := make([]RunWorkflowParams, n)
			for i := range ps {
				ps[i] = RunWorkflowParams{Workflow: "bone", RunID: fmt.Sprintf("%s-%d", prefix, i)}
			}
			var got []RunStarted
			err := inCallersTx(t, c, commit,
				func(ts store.TxStore[pgx.Tx], tx pgx.Tx) (err error) {
					got, err = RunWorkflowsTx(ctx, c, ts, tx, ps)
					return err
				},
				func(ts store.TxStore[*sql.Tx], tx *sql.Tx) (err error) {
					got, err = RunWorkflowsTx(ctx, c, ts, tx, ps)
					return err
				})
			return got, err
		}
		if _, err := start("rolled", 70, false); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"rolled-0", "rolled-69"} {
			if _, err := c.WorkflowRun(ctx, id); !errors.Is(err, ErrNotFound) {
				t.Errorf("a rolled-back run exists: %v", err)
			}
			if _, err := c.Get(ctx, id+".a"); !errors.Is(err, ErrNotFound) {
				t.Errorf("a rolled-back run's step task exists: %v", err)
			}
		}
		got, err := start("kept", 70, true)
		if err != nil || len(got) != 70 {
			t.Fatalf("committed batch: %d %v", len(got), err)
		}
		for _, id := range []string{"kept-0", "kept-69"} {
			if tk, err := c.Get(ctx, id+".a"); err != nil || tk.State != StatePending {
				t.Errorf("committed run %s's first step: %+v %v", id, tk, err)
			}
		}
		// A run id that exists, in the caller's transaction: the conflict
		// names it; the caller rolls back.
		_, err = start("kept", 1, false)
		var be *BatchError
		if !errors.As(err, &be) || be.Index != 0 || !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), `"kept-0" already exists`) {
			t.Fatalf("a taken run id in the caller's transaction: %v", err)
		}
		testwait.For(t, "the committed runs' events", func() bool {
			page, err := c.ReadEvents(ctx, ReadEventsParams{Stream: "run.kept-69", Limit: 10})
			return err == nil && len(page.Events) > 0
		})
	})
}

// TestRunWorkflowsTraceForced: in a batch at sampling ratio 0, the run
// started with Trace is one sampled trace (its root, each step's dispatch,
// each attempt) and the run beside it without Trace is not sampled.
func TestRunWorkflowsTraceForced(t *testing.T) {
	t.Parallel()
	tracedClients(t, telemetry.Sampler(0), func(t *testing.T, c *Client, sr *tracetest.SpanRecorder) {
		applyYAML(t, c, threeStepYAML)
		startWorker(t, c, map[string]Handler{"ok": okHandler()})
		ctx := context.Background()
		got, err := c.RunWorkflows(ctx, []RunWorkflowParams{{Workflow: "three"}, {Workflow: "three", Trace: true}})
		if err != nil {
			t.Fatal(err)
		}
		quiet, forced := got[0], got[1]
		waitRun(t, c, quiet.RunID, workflow.RunSucceeded)
		waitRun(t, c, forced.RunID, workflow.RunSucceeded)
		root := rootSpan(t, sr, forced.RunID)
		// The last attempt's span ends once its settle returned: read
		// until it has.
		names := map[string]int{}
		testwait.For(t, "the forced run's spans", func() bool {
			clear(names)
			for _, s := range sr.Ended() {
				if s.SpanContext().TraceID() == root.SpanContext().TraceID() {
					names[strings.Fields(s.Name())[0]]++
				}
			}
			return names["run"] == 1 && names["dispatch"] == 3 && names["process"] == 3
		})
		for _, s := range sr.Ended() {
			id := spanAttr(s, "messaging.message.id")
			if spanAttr(s, "run_id") == quiet.RunID || strings.HasPrefix(id, quiet.RunID) {
				t.Errorf("span %s of the unforced run was sampled", s.Name())
			}
		}
	})
}
