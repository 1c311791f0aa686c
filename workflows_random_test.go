package backstop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/workflowtest"
)

// TestWorkflowRandomRunsOnStores drives random definitions on both stores
// through the real claim and the engine's one settle path: steps are
// claimed a few at a time and held (they run concurrently, for random
// durations: any held task may settle next), outcomes are random, the run
// is canceled at random moments (a held task then stops, ends with a retry
// the store turns into canceled, or finishes anyway), and dead steps are
// replayed by an operator. After each run its event stream is checked
// against workflowtest.Check's rules, and a run that ended has no task
// left to run.
func TestWorkflowRandomRunsOnStores(t *testing.T) {
	t.Parallel()
	forEachRuleStore(t, func(t *testing.T, e *ruleEnv) {
		for seed := range uint64(100) {
			e.randomRun(seed)
			if t.Failed() {
				return
			}
		}
	})
}

func (e *ruleEnv) randomRun(seed uint64) {
	t := e.t
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 11))
	src := workflowtest.RandomDefinition(r, fmt.Sprintf("rnd%d", seed), "wf")
	def, err := workflow.Parse([]byte(src))
	if err != nil {
		t.Fatalf("seed %d: %v\n%s", seed, err, src)
	}
	runID := e.start(src, workflowtest.RandomInput(r))
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d run %s: %s\n%s", seed, runID, fmt.Sprintf(format, args...), src)
	}
	cancelAt := -1
	if r.IntN(2) == 0 {
		cancelAt = r.IntN(10)
	}
	held := map[string]*Task{} // claimed, not settled: running
	for i := 0; ; i++ {
		if i > 500 {
			fail("the run never ends")
		}
		if i == cancelAt || i > cancelAt && cancelAt >= 0 && r.IntN(20) == 0 {
			if _, err := e.c.CancelRun(ctx, runID); err != nil && !errors.Is(err, ErrConflict) {
				fail("cancel: %v", err)
			}
		}
		e.clock.t = e.clock.t.Add(time.Millisecond)
		if len(held) == 0 || len(held) < 4 && r.IntN(3) != 0 {
			tasks, err := e.c.store.Claim(ctx, store.ClaimParams{Queue: "wf", WorkerID: "rules", Max: 1 + r.IntN(3),
				Now: e.clock.t, Lease: time.Hour})
			if err != nil {
				fail("claim: %v", err)
			}
			for _, tk := range tasks {
				held[tk.ID] = tk
			}
			if len(tasks) > 0 {
				continue
			}
		}
		if len(held) > 0 {
			ids := slices.Sorted(func(yield func(string) bool) {
				for id := range held {
					if !yield(id) {
						return
					}
				}
			})
			tk := held[ids[r.IntN(len(ids))]]
			delete(held, tk.ID)
			e.settleRandom(r, tk, fail)
			continue
		}
		// Nothing runs and nothing is claimable.
		run := e.run(runID)
		if workflow.Finished(run.State) {
			break
		}
		if run.State != workflow.RunFailed && run.State != workflow.RunCompensationFailed {
			var tasks []string
			_ = e.c.eachRunTask(ctx, runID, func(tk *Task) {
				tasks = append(tasks, fmt.Sprintf("%s=%s@%s", tk.ID, tk.State, tk.RunAt.Format(time.StampMicro)))
			})
			fail("the run is %s with nothing to run: %s; tasks %v (now %s)", run.State, states(run), tasks, e.clock.t.Format(time.StampMicro))
		}
		if r.IntN(3) == 0 {
			break // left for an operator
		}
		var dead []string
		for _, s := range run.Steps {
			if s.TaskID != "" && s.State == workflow.StepFailed {
				dead = append(dead, s.TaskID)
			}
			for _, it := range s.Items {
				if it.TaskID != "" && it.State == workflow.StepFailed {
					dead = append(dead, it.TaskID)
				}
			}
		}
		tasks := make([]string, 0, len(dead))
		for _, id := range dead {
			if tk, err := e.c.Get(ctx, id); err == nil && tk.State == StateDead {
				tasks = append(tasks, id)
			}
		}
		if len(tasks) == 0 {
			break
		}
		id := tasks[r.IntN(len(tasks))]
		if res, err := e.c.Replay(ctx, ReplayParams{ID: id, Actor: "ops"}); err != nil || !res.Replayed {
			fail("replay %s: %+v %v", id, res, err)
		}
	}
	run := e.run(runID)
	history := e.history(runID, run.State)
	hd, err := workflowtest.DefOf(def)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := workflowtest.Check(hd, history); err != nil {
		fail("%v", err)
	}
	if workflow.Finished(run.State) {
		if err := e.c.eachRunTask(ctx, runID, func(tk *Task) {
			if tk.State == StatePending || tk.State == StateRunning || tk.State == StateScheduled {
				fail("the run ended %s while its task %s is %s", run.State, tk.ID, tk.State)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// settleRandom ends a held attempt as a worker would: a task whose cancel
// was requested mostly stops (canceled, or a failure the store turns into
// canceled), else it finishes anyway; others succeed or die.
func (e *ruleEnv) settleRandom(r *rand.Rand, tk *Task, fail func(string, ...any)) {
	ctx := context.Background()
	e.clock.t = e.clock.t.Add(time.Millisecond)
	cur, err := e.c.store.Get(ctx, tk.ID)
	if err != nil {
		fail("get %s: %v", tk.ID, err)
	}
	s := store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, FinishedAt: e.clock.t}
	n := r.IntN(6)
	switch {
	case cur.CancelRequestedAt != nil && n < 2:
		s.Outcome, s.State, s.Error = bt.OutcomeCanceled, bt.StateCanceled, "canceled by operator"
	case cur.CancelRequestedAt != nil && n < 4:
		// The handler failed before its heartbeat saw the cancel: a retry,
		// which the store turns into canceled.
		s.Outcome, s.State, s.Error, s.RunAt = bt.OutcomeTransientError, bt.StateScheduled, "boom", e.clock.t.Add(time.Minute)
	case n == 0:
		s.Outcome, s.State, s.DeadReason, s.Error = bt.OutcomePermanentError, bt.StateDead, bt.ReasonPermanentError, "boom"
	default:
		s.Outcome, s.State, s.Result = bt.OutcomeSucceeded, bt.StateSucceeded, json.RawMessage(`1`)
	}
	oks, err := e.c.e.Settle(ctx, []store.Settlement{s})
	if err != nil || !oks[0] {
		fail("settle %s as %s: %v %v", tk.ID, s.State, oks, err)
	}
}

// history is the run's stream as workflowtest reads it, once it holds the
// event that put the run in state (the gap-free log serves an event once
// every earlier transaction settled).
func (e *ruleEnv) history(runID string, state store.RunState) []workflowtest.Event {
	e.t.Helper()
	var out []workflowtest.Event
	testwait.For(e.t, fmt.Sprintf("run %s's stream to reach %s", runID, state), func() bool {
		out = out[:0]
		last := ""
		after := ""
		for {
			page, err := e.c.ReadEvents(context.Background(), ReadEventsParams{Stream: "run." + runID, After: after, Limit: 1000})
			if err != nil {
				e.t.Fatal(err)
			}
			for _, ev := range page.Events {
				out = append(out, workflowtest.Event{Type: ev.Type, Body: ev.Body})
				switch ev.Type {
				case workflow.EventRunFinished, workflow.EventRunHalted:
					var b struct {
						State string `json:"state"`
					}
					_ = json.Unmarshal(ev.Body, &b)
					last = b.State
				case workflow.EventRunResumed, workflow.EventRunStarted:
					last = string(workflow.RunRunning)
				}
			}
			if len(page.Events) < 1000 || page.Next == "" {
				break
			}
			after = page.Next
		}
		return !workflow.Terminal(state) || last == string(state)
	})
	return out
}
