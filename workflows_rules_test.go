package backstop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
)

// Every workflow rule on both stores, on a frozen clock, with no worker:
// the test claims the steps' tasks from the real store and settles them
// through the engine's one settle path (Client.settle), choosing each
// attempt's outcome by the task's kind. What the engine wrote — runs, step
// rows, tasks, events — is read back from the store.

type frozenClock struct{ t time.Time }

func (c *frozenClock) Now() time.Time { return c.t }

// ruleEnv is a client on a frozen clock over one store.
type ruleEnv struct {
	t     *testing.T
	c     *Client
	clock *frozenClock
	// order is the kinds in the order their attempts were settled.
	order []string
}

func forEachRuleStore(t *testing.T, fn func(t *testing.T, e *ruleEnv)) {
	cfg := func() *Config { return &Config{Clock: &frozenClock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}} }
	forEachStoreClient(t, cfg, func(t *testing.T, c *Client) {
		fn(t, &ruleEnv{t: t, c: c, clock: c.cfg.Clock.(*frozenClock)})
	})
}

// drain claims and settles the queue's tasks until none is claimable:
// kinds ending in "_fail" fail permanently (dead at once), the others
// succeed with the result {"kind": K, "item": the payload's item}.
func (e *ruleEnv) drain() {
	e.t.Helper()
	ctx := context.Background()
	for round := 0; ; round++ {
		if round > 100 {
			e.t.Fatal("the run never stops enqueueing")
		}
		e.clock.t = e.clock.t.Add(time.Second)
		tasks, err := e.c.store.Claim(ctx, store.ClaimParams{Queue: "wf", WorkerID: "rules", Max: 100,
			Now: e.clock.t, Lease: time.Minute})
		if err != nil {
			e.t.Fatal(err)
		}
		if len(tasks) == 0 {
			return
		}
		// Settle one at a time, in id order: a deterministic completion
		// order (compensations run in its reverse).
		slices.SortFunc(tasks, func(a, b *Task) int { return strings.Compare(a.ID, b.ID) })
		for _, tk := range tasks {
			e.clock.t = e.clock.t.Add(time.Millisecond)
			s := store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, FinishedAt: e.clock.t}
			if strings.HasSuffix(tk.Kind, "_fail") {
				s.Outcome, s.State, s.DeadReason, s.Error = bt.OutcomePermanentError, bt.StateDead, bt.ReasonPermanentError, tk.Kind+" failed"
			} else {
				var env struct {
					Item json.RawMessage `json:"item"`
				}
				_ = json.Unmarshal(tk.Payload, &env)
				res, _ := json.Marshal(map[string]any{"kind": tk.Kind, "item": env.Item})
				s.Outcome, s.State, s.Result = bt.OutcomeSucceeded, bt.StateSucceeded, res
			}
			oks, err := e.c.e.Settle(ctx, []store.Settlement{s})
			if err != nil || !oks[0] {
				e.t.Fatalf("settling %s: %v %v", tk.ID, oks, err)
			}
			e.order = append(e.order, tk.Kind)
		}
	}
}

func (e *ruleEnv) start(src, input string) string {
	e.t.Helper()
	def, err := workflow.Parse([]byte(src))
	if err != nil {
		e.t.Fatal(err)
	}
	if _, _, err := e.c.ApplyWorkflow(context.Background(), def); err != nil {
		e.t.Fatal(err)
	}
	r, err := e.c.RunWorkflow(context.Background(), RunWorkflowParams{Workflow: def.Name, Input: json.RawMessage(input)})
	if err != nil {
		e.t.Fatal(err)
	}
	return r.RunID
}

func (e *ruleEnv) run(id string) *WorkflowRun {
	e.t.Helper()
	r, err := e.c.WorkflowRun(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// states is "step=state" for every step, in definition order.
func states(r *WorkflowRun) string {
	var out []string
	for _, s := range r.Steps {
		out = append(out, s.ID+"="+string(s.State))
	}
	return strings.Join(out, " ")
}

// events is the run's stream once it holds every event in want (the
// gap-free log serves an event once every earlier transaction settled: a
// read right after a commit may not see it yet), or after 10 seconds.
func (e *ruleEnv) events(runID string, want ...string) []string {
	e.t.Helper()
	var out []string
	testwait.For(e.t, fmt.Sprintf("events %v on run %s", want, runID), func() bool {
		page, err := e.c.ReadEvents(context.Background(), ReadEventsParams{Stream: "run." + runID, Limit: 1000})
		if err != nil {
			e.t.Fatal(err)
		}
		out = out[:0]
		for _, ev := range page.Events {
			if strings.HasPrefix(ev.Type, "run.") || strings.HasPrefix(ev.Type, "step.") {
				out = append(out, ev.Type)
			}
		}
		for _, w := range want {
			if !slices.Contains(out, w) {
				return false
			}
		}
		return true
	})
	return out
}

func (e *ruleEnv) want(what, got, want string) {
	e.t.Helper()
	if got != want {
		e.t.Errorf("%s:\n got %s\nwant %s", what, got, want)
	}
}

func TestWorkflowRulesOnStores(t *testing.T) {
	t.Parallel()
	forEachRuleStore(t, func(t *testing.T, e *ruleEnv) {
		ctx := context.Background()

		// Fan-out and fan-in, a false when skipping and propagating, an
		// empty fan-out succeeding at once.
		id := e.start(`
name: fan
queue: wf
steps:
  - {id: a, kind: a}
  - {id: each, kind: each, needs: [a], for_each: input.items}
  - {id: none, kind: none, needs: [a], for_each: input.empty}
  - {id: skip, kind: skip, needs: [a], when: input.big}
  - {id: after_skip, kind: after_skip, needs: [skip]}
  - {id: join, kind: join, needs: [each, none]}
`, `{"items":[1,2,3],"empty":[],"big":false}`)
		e.drain()
		r := e.run(id)
		e.want("fan: run", string(r.State), "succeeded")
		e.want("fan: steps", states(r), "a=succeeded each=succeeded none=succeeded skip=skipped after_skip=skipped join=succeeded")
		if j, err := e.c.Get(ctx, id+".join"); err != nil || !strings.Contains(string(j.Payload), `"each":[{"item":1,"kind":"each"},{"item":2,"kind":"each"},{"item":3,"kind":"each"}]`) ||
			!strings.Contains(string(j.Payload), `"none":[]`) {
			t.Errorf("join's payload (fan-in results in item order): %s %v", j.Payload, err)
		}
		fanEvents := []string{"run.started", "step.enqueued", "step.succeeded", "step.skipped", "run.finished"}
		evs := e.events(id, fanEvents...)
		for _, want := range fanEvents {
			if !slices.Contains(evs, want) {
				t.Errorf("fan: no %s on the run's stream: %v", want, evs)
			}
		}

		// continue: the failed step's dependents are skipped, the other
		// branch goes on, the run is partial.
		e.order = nil
		id = e.start(`
name: cont
queue: wf
steps:
  - {id: bad, kind: c_fail, on_failure: continue}
  - {id: after_bad, kind: after_bad, needs: [bad]}
  - {id: other, kind: other}
`, `{}`)
		e.drain()
		r = e.run(id)
		e.want("continue: run", string(r.State), "partial")
		e.want("continue: steps", states(r), "bad=failed after_bad=skipped other=succeeded")

		// route: the target runs with the failure; a step needing both the
		// failed step and the target waits for the target; the run can end
		// succeeded.
		id = e.start(`
name: route
queue: wf
steps:
  - {id: charge, kind: charge_fail, on_failure: "route:manual"}
  - {id: manual, kind: manual}
  - {id: notify, kind: notify, needs: [charge, manual]}
  - {id: ship, kind: ship, needs: [charge]}
`, `{"card":"x"}`)
		e.drain()
		r = e.run(id)
		e.want("route: run", string(r.State), "succeeded")
		e.want("route: steps", states(r), "charge=failed manual=succeeded notify=succeeded ship=skipped")
		if m, err := e.c.Get(ctx, id+".manual"); err != nil || !strings.Contains(string(m.Payload), `"failure":{"error":"charge_fail failed","input":{"input":{"card":"x"}`) ||
			!strings.Contains(string(m.Payload), `"step":"charge"}`) {
			t.Errorf("route target's payload: %s %v", m.Payload, err)
		}

		// A saga: compensations in reverse completion order, one at a time;
		// a step without compensate is passed over.
		e.order = nil
		id = e.start(`
name: saga
queue: wf
rollback: on_fail
steps:
  - {id: s1, kind: s1, compensate: u1}
  - {id: s2, kind: s2, needs: [s1], compensate: u2}
  - {id: s3, kind: s3, needs: [s2]}
  - {id: s4, kind: s4_fail, needs: [s3]}
  - {id: u1, kind: u1, compensation: true}
  - {id: u2, kind: u2, compensation: true}
`, `{}`)
		e.drain()
		r = e.run(id)
		e.want("saga: run", string(r.State), "compensated")
		e.want("saga: order", strings.Join(e.order, ","), "s1,s2,s3,s4_fail,u2,u1")
		if evs := e.events(id, "run.compensating"); !slices.Contains(evs, "run.compensating") {
			t.Errorf("saga: no run.compensating: %v", evs)
		}

		// A dead compensation: compensation_failed; replaying it (same id;
		// its next attempt succeeds, as a fixed handler's would) resumes the
		// rollback to compensated.
		id = e.start(`
name: undone
queue: wf
rollback: on_fail
steps:
  - {id: s1, kind: s1, compensate: u1}
  - {id: s2, kind: s2_fail, needs: [s1]}
  - {id: u1, kind: u1_fail, compensation: true}
`, `{}`)
		e.drain()
		r = e.run(id)
		e.want("undone: run", string(r.State), "compensation_failed")
		e.replayAndSucceed(id + ".u1")
		e.want("undone: run after the replay", string(e.run(id).State), "compensated")

		// halt with rollback manual: failed, waits; the dead step replayed
		// (same id) resumes the run to succeeded.
		id = e.start(`
name: halt
queue: wf
steps:
  - {id: a, kind: a}
  - {id: b, kind: b_fail, needs: [a]}
  - {id: c, kind: c, needs: [b]}
`, `{}`)
		e.drain()
		r = e.run(id)
		e.want("halt: run", string(r.State), "failed")
		e.want("halt: steps", states(r), "a=succeeded b=failed c=waiting")
		e.replayAndSucceed(id + ".b")
		e.drain()
		r = e.run(id)
		e.want("halt: run after the replay", string(r.State), "succeeded")
		e.want("halt: steps after the replay", states(r), "a=succeeded b=succeeded c=succeeded")
		if evs := e.events(id, "run.resumed"); !slices.Contains(evs, "run.resumed") {
			t.Errorf("halt: no run.resumed: %v", evs)
		}

		// Cancel with rollback on_fail: the succeeded step is compensated,
		// the waiting one canceled, the run ends canceled.
		id = e.start(`
name: cancel
queue: wf
rollback: on_fail
steps:
  - {id: a, kind: a, compensate: ua}
  - {id: b, kind: b, needs: [a]}
  - {id: ua, kind: ua, compensation: true}
`, `{}`)
		e.clock.t = e.clock.t.Add(time.Second)
		tasks, err := e.c.store.Claim(ctx, store.ClaimParams{Queue: "wf", WorkerID: "rules", Max: 1, Now: e.clock.t, Lease: time.Minute})
		if err != nil || len(tasks) != 1 {
			t.Fatalf("claim a: %v %v", tasks, err)
		}
		if oks, err := e.c.e.Settle(ctx, []store.Settlement{{TaskID: tasks[0].ID, ExecutionID: tasks[0].ExecutionID,
			Outcome: bt.OutcomeSucceeded, State: bt.StateSucceeded, FinishedAt: e.clock.t}}); err != nil || !oks[0] {
			t.Fatalf("settle a: %v %v", oks, err)
		}
		if _, err := e.c.CancelRun(ctx, id); err != nil {
			t.Fatal(err)
		}
		if tk, err := e.c.Get(ctx, id+".b"); err != nil || tk.State != StateCanceled {
			t.Errorf("cancel: b's task %v %v, want canceled", tk, err)
		}
		e.drain()
		r = e.run(id)
		e.want("cancel: run", string(r.State), "canceled")
		if ua, err := e.c.Get(ctx, id+".ua"); err != nil || ua.State != StateSucceeded {
			t.Errorf("cancel: the compensation of a: %v %v, want succeeded", ua, err)
		}
		if _, err := e.c.CancelRun(ctx, id); !errors.Is(err, ErrConflict) {
			t.Errorf("cancel again: %v, want ErrConflict", err)
		}

		// A new definition under the same name is a new version; a run
		// keeps the version (and plan hash) it started with.
		def1, _ := workflow.Parse([]byte("name: ver\nqueue: wf\nsteps:\n  - {id: a, kind: a}\n"))
		v1, _, err := e.c.ApplyWorkflow(ctx, def1)
		if err != nil {
			t.Fatal(err)
		}
		old, err := e.c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "ver"})
		if err != nil {
			t.Fatal(err)
		}
		def2, _ := workflow.Parse([]byte("name: ver\nqueue: wf\nsteps:\n  - {id: a, kind: a}\n  - {id: b, kind: b, needs: [a]}\n"))
		v2, created, err := e.c.ApplyWorkflow(ctx, def2)
		if err != nil || !created || v2.Version != v1.Version+1 || v2.PlanHash == v1.PlanHash {
			t.Fatalf("second version: %+v %v %v", v2, created, err)
		}
		e.drain()
		r = e.run(old.RunID)
		e.want("versions: the old run", fmt.Sprintf("%s v%d %s %d steps", r.State, r.Version, r.PlanHash, len(r.Steps)),
			fmt.Sprintf("succeeded v%d %s 1 steps", v1.Version, v1.PlanHash))
		if tk, err := e.c.Get(ctx, old.RunID+".a"); err != nil || tk.Attributes["plan_hash"] != v1.PlanHash {
			t.Errorf("the old run's step carries plan_hash %v (%v), want %s", tk.Attributes, err, v1.PlanHash)
		}
	})
}

// replayAndSucceed replays a dead step task (same id) and settles its next
// attempt as a success, as a fixed handler would.
func (e *ruleEnv) replayAndSucceed(taskID string) {
	e.t.Helper()
	ctx := context.Background()
	if res, err := e.c.Replay(ctx, ReplayParams{ID: taskID, Actor: "ops"}); err != nil || !res.Replayed {
		e.t.Fatalf("replay %s: %+v %v", taskID, res, err)
	}
	e.clock.t = e.clock.t.Add(time.Second)
	tasks, err := e.c.store.Claim(ctx, store.ClaimParams{Queue: "wf", WorkerID: "rules", Max: 100, Now: e.clock.t, Lease: time.Minute})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, tk := range tasks {
		if tk.ID != taskID {
			e.t.Fatalf("claimed %s, want only the replayed %s", tk.ID, taskID)
		}
		if oks, err := e.c.e.Settle(ctx, []store.Settlement{{TaskID: tk.ID, ExecutionID: tk.ExecutionID,
			Outcome: bt.OutcomeSucceeded, State: bt.StateSucceeded, FinishedAt: e.clock.t, Result: json.RawMessage(`"fixed"`)}}); err != nil || !oks[0] {
			e.t.Fatalf("settle the replayed %s: %v %v", tk.ID, oks, err)
		}
	}
	if len(tasks) != 1 {
		e.t.Fatalf("claimed %d tasks after replaying %s", len(tasks), taskID)
	}
}
