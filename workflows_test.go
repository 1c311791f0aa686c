package backstop

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
	"github.com/backstophq/backstop/store/sqlitestore"
	"github.com/backstophq/backstop/workflow"
	"github.com/jackc/pgx/v5"
)

// The workflow engine end to end in the library, on a real SQLite file and
// a real Postgres server: a run's steps are ordinary tasks run by an
// in-process worker; each settlement advances the run in its transaction.

func forEachWorkflowStore(t *testing.T, fn func(t *testing.T, c *Client)) {
	forEachStoreClient(t, func() *Config { return nil }, fn)
}

// forEachStoreClient runs fn as a parallel subtest with a client (of the
// configuration cfg makes) over a migrated SQLite file and over Postgres.
func forEachStoreClient(t *testing.T, cfg func() *Config, fn func(t *testing.T, c *Client)) {
	eachStoreClient(t, true, cfg, fn)
}

// forEachStoreClientAlone is forEachStoreClient with the stores one after
// the other, for a test that reads the whole process (its goroutines): a
// top-level test that is not parallel runs with no other test beside it.
func forEachStoreClientAlone(t *testing.T, cfg func() *Config, fn func(t *testing.T, c *Client)) {
	eachStoreClient(t, false, cfg, fn)
}

func eachStoreClient(t *testing.T, parallel bool, cfg func() *Config, fn func(t *testing.T, c *Client)) {
	for _, db := range []struct {
		name string
		url  func(testing.TB) string
	}{{"sqlite", testdb.SQLite}, {"postgres", testdb.Postgres}} {
		t.Run(db.name, func(t *testing.T) {
			if parallel {
				t.Parallel()
			}
			c, err := NewClient(migratedStore(t, db.url(t)), cfg())
			if err != nil {
				t.Fatal(err)
			}
			fn(t, c)
		})
	}
}

// startWorker runs handlers on queue "wf" until the test ends.
func startWorker(t *testing.T, c *Client, handlers map[string]Handler) {
	t.Helper()
	w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"wf": 4}, PollInterval: 10 * time.Millisecond,
		MaintenanceInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for k, h := range handlers {
		w.Handle(k, h)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
}

func applyYAML(t *testing.T, c *Client, src string) WorkflowVersion {
	t.Helper()
	def, err := workflow.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	v, _, err := c.ApplyWorkflow(context.Background(), def)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitRun polls the run until its state is one of want (or the deadline).
func waitRun(t *testing.T, c *Client, runID string, want ...store.RunState) *WorkflowRun {
	t.Helper()
	var r *WorkflowRun
	testwait.For(t, fmt.Sprintf("run %s to be %v", runID, want), func() bool {
		var err error
		if r, err = c.WorkflowRun(context.Background(), runID); err != nil {
			t.Fatal(err)
		}
		return slices.Contains(want, r.State)
	})
	return r
}

func stepOf(r *WorkflowRun, id string) RunStep {
	for _, s := range r.Steps {
		if s.ID == id {
			return s
		}
	}
	return RunStep{}
}

type orderInput struct {
	Items []int  `json:"items"`
	Card  string `json:"card"`
}

func TestWorkflowFanOutFanIn(t *testing.T) {
	t.Parallel()
	forEachWorkflowStore(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		applyYAML(t, c, `
name: sum
queue: wf
steps:
  - id: start
    kind: start
  - id: double
    kind: double
    needs: [start]
    for_each: input.items
  - id: total
    kind: total
    needs: [double]
`)
		var mu sync.Mutex
		var totalSaw map[string]json.RawMessage
		startWorker(t, c, map[string]Handler{
			"start": Step(func(ctx context.Context, s StepInput[orderInput]) (map[string]int, error) {
				return map[string]int{"n": len(s.Input.Items)}, nil
			}),
			"double": Step(func(ctx context.Context, s StepInput[orderInput]) (int, error) {
				var v int
				if err := json.Unmarshal(s.Item, &v); err != nil {
					return 0, Permanent(err)
				}
				return 2 * v, nil
			}),
			"total": Step(func(ctx context.Context, s StepInput[orderInput]) (int, error) {
				mu.Lock()
				totalSaw = s.Results
				mu.Unlock()
				var ds []int
				if err := json.Unmarshal(s.Results["double"], &ds); err != nil {
					return 0, Permanent(err)
				}
				sum := 0
				for _, d := range ds {
					sum += d
				}
				return sum, nil
			}),
		})
		run, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "sum", Input: json.RawMessage(`{"items":[1,2,3]}`)})
		if err != nil {
			t.Fatal(err)
		}
		r := waitRun(t, c, run.RunID, workflow.RunSucceeded)
		if got := string(stepOf(r, "total").Result); got != "12" {
			t.Errorf("total's result = %s, want 12", got)
		}
		if d := stepOf(r, "double"); len(d.Items) != 3 || d.State != workflow.StepSucceeded {
			t.Errorf("double: %+v, want 3 succeeded items", d)
		}
		mu.Lock()
		if got := string(totalSaw["double"]); got != "[2,4,6]" {
			t.Errorf("total saw results.double = %s, want [2,4,6] (item order)", got)
		}
		mu.Unlock()
		// The run's story is on its stream (the gap-free log serves an
		// event once every earlier transaction settled: read until it is).
		wantTypes := []string{"run.started", "step.enqueued", "step.succeeded", "run.finished"}
		var types []string
		testwait.For(t, "run.finished on the run's stream", func() bool {
			page, err := c.ReadEvents(ctx, ReadEventsParams{Stream: "run." + run.RunID, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			types = types[:0]
			for _, e := range page.Events {
				types = append(types, e.Type)
			}
			return slices.Contains(types, "run.finished")
		})
		for _, want := range wantTypes {
			if !slices.Contains(types, want) {
				t.Errorf("run stream lacks %s: %v", want, types)
			}
		}
		// Every step task carries the run's attributes.
		tasks, err := c.RunTasks(ctx, run.RunID, ListParams{})
		if err != nil {
			t.Fatal(err)
		}
		if len(tasks) != 5 {
			t.Errorf("run has %d tasks, want 5 (start, 3 items, total)", len(tasks))
		}
		for _, tk := range tasks {
			if tk.Attributes["plan_hash"] != r.PlanHash || tk.Attributes["step_id"] == "" || tk.Attributes["workflow"] != "sum" {
				t.Errorf("task %s attributes %v", tk.ID, tk.Attributes)
			}
		}
	})
}

const sagaYAML = `
name: order
queue: wf
rollback: %s
steps:
  - id: reserve
    kind: reserve_slot
    compensate: undo_reserve
  - id: charge
    kind: charge_card
    needs: [reserve]
    compensate: refund_card
    retry: {max_attempts: 3, schedule: [10ms]}
  - id: notify
    kind: send_receipt
    needs: [charge]
  - id: undo_reserve
    kind: release_slot
    compensation: true
  - id: refund_card
    kind: refund
    compensation: true
`

// sagaHandlers: charge fails permanently while the input's card is "bad".
func sagaHandlers(ran *sync.Map) map[string]Handler {
	mark := func(kind string) Handler {
		return Step(func(ctx context.Context, s StepInput[orderInput]) (string, error) {
			ran.Store(kind, true)
			return kind + " done", nil
		})
	}
	return map[string]Handler{
		"reserve_slot": mark("reserve_slot"),
		"charge_card": Step(func(ctx context.Context, s StepInput[orderInput]) (string, error) {
			if s.Input.Card == "bad" {
				return "", Permanent(errors.New("card declined"))
			}
			ran.Store("charge_card", true)
			return "charged", nil
		}),
		"send_receipt": mark("send_receipt"),
		"release_slot": Step(func(ctx context.Context, s StepInput[orderInput]) (string, error) {
			if s.Compensating == nil || s.Compensating.Step != "reserve" {
				return "", Permanent(fmt.Errorf("release_slot ran without compensating reserve: %+v", s.Compensating))
			}
			ran.Store("release_slot", true)
			return "released", nil
		}),
		"refund": mark("refund"),
	}
}

func TestWorkflowSagaCompensates(t *testing.T) {
	t.Parallel()
	forEachWorkflowStore(t, func(t *testing.T, c *Client) {
		applyYAML(t, c, fmt.Sprintf(sagaYAML, "on_fail"))
		var ran sync.Map
		startWorker(t, c, sagaHandlers(&ran))
		run, err := c.RunWorkflow(context.Background(), RunWorkflowParams{Workflow: "order", Input: json.RawMessage(`{"card":"bad"}`)})
		if err != nil {
			t.Fatal(err)
		}
		r := waitRun(t, c, run.RunID, workflow.RunCompensated, workflow.RunCompensationFailed, workflow.RunFailed)
		if r.State != workflow.RunCompensated {
			t.Fatalf("run ended %s, want compensated", r.State)
		}
		if _, ok := ran.Load("release_slot"); !ok {
			t.Error("undo_reserve (release_slot) did not run")
		}
		for _, k := range []string{"refund", "send_receipt", "charge_card"} {
			if _, ok := ran.Load(k); ok {
				t.Errorf("%s ran; charge never completed", k)
			}
		}
		if s := stepOf(r, "charge"); s.State != workflow.StepFailed {
			t.Errorf("charge is %s, want failed", s.State)
		}
		if s := stepOf(r, "notify"); s.State != StepWaiting && s.State != workflow.StepSkipped {
			t.Errorf("notify is %s, want waiting or skipped", s.State)
		}
	})
}

func TestWorkflowHaltedRunResumesOnReplay(t *testing.T) {
	t.Parallel()
	forEachWorkflowStore(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		applyYAML(t, c, fmt.Sprintf(sagaYAML, "manual"))
		var ran sync.Map
		startWorker(t, c, sagaHandlers(&ran))
		run, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "order", Input: json.RawMessage(`{"card":"bad"}`)})
		if err != nil {
			t.Fatal(err)
		}
		r := waitRun(t, c, run.RunID, workflow.RunFailed)
		charge := stepOf(r, "charge")
		if charge.State != workflow.StepFailed || charge.TaskID == "" {
			t.Fatalf("charge: %+v", charge)
		}
		dead, err := c.Get(ctx, charge.TaskID)
		if err != nil || dead.State != StateDead {
			t.Fatalf("charge's task: %v %v", dead, err)
		}
		res, err := c.Replay(ctx, ReplayParams{ID: charge.TaskID, Actor: "ops",
			MergePatch: json.RawMessage(`{"input":{"card":"good"}}`)})
		if err != nil || !res.Replayed {
			t.Fatalf("replay: %+v %v", res, err)
		}
		r = waitRun(t, c, run.RunID, workflow.RunSucceeded)
		if _, ok := ran.Load("send_receipt"); !ok {
			t.Error("notify did not run after the replay")
		}
		evs, err := c.Events(ctx, charge.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		replayed := false
		for _, e := range evs {
			replayed = replayed || (e.Type == "dlq.replayed" && e.Actor == "ops")
		}
		if !replayed {
			t.Error("the charge task's history does not show the replay")
		}
		if s := stepOf(r, "charge"); s.State != workflow.StepSucceeded || s.TaskID != charge.TaskID {
			t.Errorf("charge after replay: %+v (same task id %s)", s, charge.TaskID)
		}
	})
}

func TestWorkflowCancelRun(t *testing.T) {
	t.Parallel()
	forEachWorkflowStore(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		applyYAML(t, c, fmt.Sprintf(sagaYAML, "manual"))
		// No worker: reserve waits.
		run, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "order"})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.CancelRun(ctx, run.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if r.State != workflow.RunCanceled {
			t.Errorf("canceled run is %s", r.State)
		}
		tk, err := c.Get(ctx, stepOf(r, "reserve").TaskID)
		if err != nil || tk.State != StateCanceled {
			t.Errorf("reserve's task: %v %v, want canceled", tk, err)
		}
		if _, err := c.CancelRun(ctx, run.RunID); !errors.Is(err, ErrConflict) {
			t.Errorf("canceling a canceled run: %v, want ErrConflict", err)
		}
		if _, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "order", RunID: run.RunID}); !errors.Is(err, ErrConflict) {
			t.Errorf("starting a run with an existing id: %v, want ErrConflict", err)
		}
		if _, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "nope"}); !errors.Is(err, ErrNotFound) {
			t.Errorf("running an unknown workflow: %v, want ErrNotFound", err)
		}
	})
}

// A result too large to pass on (the next step's payload would be over the
// client's limit) fails its step permanently, under its policy, instead of
// failing the settlement's transaction for ever.
func TestWorkflowResultTooLargeToPassOn(t *testing.T) {
	t.Parallel()
	forEachWorkflowStore(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		c.cfg.MaxPayloadSize = 16 << 10
		applyYAML(t, c, `
name: big
queue: wf
steps:
  - id: produce
    kind: produce
  - id: consume
    kind: consume
    needs: [produce]
`)
		consumed := make(chan struct{}, 1)
		startWorker(t, c, map[string]Handler{
			"produce": Step(func(ctx context.Context, s StepInput[json.RawMessage]) (string, error) {
				return strings.Repeat("x", 32<<10), nil
			}),
			"consume": HandlerFunc(func(context.Context, *Task) error { consumed <- struct{}{}; return nil }),
		})
		run, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "big"})
		if err != nil {
			t.Fatal(err)
		}
		r := waitRun(t, c, run.RunID, workflow.RunFailed)
		p := stepOf(r, "produce")
		if p.State != workflow.StepFailed || !strings.Contains(p.Error, "cannot be passed on") {
			t.Errorf("produce: %+v, want failed: cannot be passed on", p)
		}
		tk, err := c.Get(ctx, p.TaskID)
		if err != nil || tk.State != StateDead || tk.DeadReason != "permanent_error" {
			t.Errorf("produce's task: %+v %v, want a permanent dead letter", tk, err)
		}
		select {
		case <-consumed:
			t.Error("consume ran")
		default:
		}
	})
}

// RunWorkflowTx: a run started in the caller's own transaction (pgx.Tx on
// Postgres, *sql.Tx on SQLite) exists if and only if the caller commits.
func TestRunWorkflowTx(t *testing.T) {
	t.Parallel()
	forEachWorkflowStore(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		applyYAML(t, c, "name: tx\nqueue: wf\nsteps:\n  - {id: a, kind: a}\n")
		start := func(runID string, commit bool) {
			t.Helper()
			p := RunWorkflowParams{Workflow: "tx", RunID: runID, Input: json.RawMessage(`{"n":1}`)}
			err := inCallersTx(t, c, commit,
				func(ts store.TxStore[pgx.Tx], tx pgx.Tx) (err error) {
					_, err = RunWorkflowTx(ctx, c, ts, tx, p)
					return err
				},
				func(ts store.TxStore[*sql.Tx], tx *sql.Tx) (err error) {
					_, err = RunWorkflowTx(ctx, c, ts, tx, p)
					return err
				})
			if err != nil {
				t.Fatal(err)
			}
		}
		start("rolled-back", false)
		if _, err := c.WorkflowRun(ctx, "rolled-back"); !errors.Is(err, ErrNotFound) {
			t.Errorf("a rolled-back run exists: %v", err)
		}
		if _, err := c.Get(ctx, "rolled-back.a"); !errors.Is(err, ErrNotFound) {
			t.Errorf("a rolled-back run's step task exists: %v", err)
		}
		start("committed", true)
		r, err := c.WorkflowRun(ctx, "committed")
		if err != nil || r.State != workflow.RunRunning {
			t.Fatalf("committed run: %+v %v", r, err)
		}
		if tk, err := c.Get(ctx, "committed.a"); err != nil || tk.State != StatePending {
			t.Errorf("committed run's first step: %+v %v", tk, err)
		}
	})
}

// TestWorkflowRedriveResumesHaltedRunsAtOnce: a redrive without a patch
// replays the halted runs' dead steps set-based; their runs are running
// again as soon as it returns (not only once each step settles): nothing
// runs in between (the worker is stopped).
func TestWorkflowRedriveResumesHaltedRunsAtOnce(t *testing.T) {
	t.Parallel()
	forEachWorkflowStore(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		applyYAML(t, c, fmt.Sprintf(sagaYAML, "manual"))
		var ran sync.Map
		w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"wf": 4}, PollInterval: 10 * time.Millisecond,
			MaintenanceInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		for k, h := range sagaHandlers(&ran) {
			w.Handle(k, h)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		var runs []string
		for range 3 {
			run, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "order", Input: json.RawMessage(`{"card":"bad"}`)})
			if err != nil {
				t.Fatal(err)
			}
			runs = append(runs, run.RunID)
		}
		for _, id := range runs {
			waitRun(t, c, id, workflow.RunFailed)
		}
		if err := w.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := c.Redrive(ctx, RedriveParams{Steps: StepSelection{Workflow: "order", Step: "charge"}, Actor: "ops"}, nil)
		if err != nil || res.Replayed != 3 {
			t.Fatalf("redrive: %+v %v", res, err)
		}
		for _, id := range runs {
			r, err := c.WorkflowRun(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if r.State != workflow.RunRunning {
				t.Errorf("run %s right after the redrive: %s, want running", id, r.State)
			}
			if s := stepOf(r, "charge"); s.State != workflow.StepPending {
				t.Errorf("run %s: charge is %s after the redrive, want pending", id, s.State)
			}
		}
	})
}

// inCallersTx runs pg or lite, as c's store is Postgres or SQLite, in a
// transaction of the store's driver begun for it (the caller's own, as the
// *Tx APIs take it), and commits it when commit is set and the call
// succeeded, else rolls it back: the call's error, or the commit's.
func inCallersTx(t *testing.T, c *Client, commit bool,
	pg func(store.TxStore[pgx.Tx], pgx.Tx) error, lite func(store.TxStore[*sql.Tx], *sql.Tx) error) error {
	t.Helper()
	ctx := context.Background()
	switch s := c.Store().(type) {
	case *pgstore.Store:
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err = pg(s.Txs(), tx); err == nil && commit {
			return tx.Commit(ctx)
		}
		_ = tx.Rollback(ctx)
		return err
	case *sqlitestore.Store:
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err = lite(s.Txs(), tx); err == nil && commit {
			return tx.Commit()
		}
		_ = tx.Rollback()
		return err
	}
	t.Fatalf("store %T", c.Store())
	return nil
}
