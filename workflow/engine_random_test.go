package workflow

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/backstophq/backstop/workflow/workflowtest"
)

// TestRandomRuns drives random definitions with random outcomes, settling
// concurrent steps in random order, with cancels at random moments (while
// steps run, while the run compensates) and operators replaying dead
// tasks, the clock moving on at random (for_each budgets run out, and the
// run is woken at its Plan.WakeAt now and then), to the end, checking on
// every plan: no task enqueued twice (the harness), no step started before
// what it needs allowed it, a plan's WakeAt is in the future, the history
// rules of workflowtest.Check (no run stopped while a step task runs, no
// compensation while a step runs, a step undone only after its succeeded
// dependents, every succeeded step undone exactly once by a rollback,
// items in order, within their concurrency and budget), and every run ends
// in a terminal state with nothing pending and no item left waiting
// unless the run waits for an operator.
func TestRandomRuns(t *testing.T) {
	var seen randomSeen
	for seed := range uint64(1000) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { randomRun(t, seed, &seen) })
	}
	t.Logf("loop options seen: %+v", seen)
	// The runs went through the loop options, not around them.
	if seen.waiting == 0 || seen.budgetFailed == 0 || seen.woken == 0 || seen.whenErrorSkips == 0 {
		t.Fatalf("the random runs missed an option: %+v", seen)
	}
}

// randomSeen counts the random runs that went through the loop options.
type randomSeen struct {
	waiting        int // an item waited for a slot
	budgetFailed   int // a budget failed items
	woken          int // a wake-up changed the run
	whenErrorSkips int // a when error skipped a step
}

func randomRun(t *testing.T, seed uint64, seen *randomSeen) {
	r := rand.New(rand.NewPCG(seed, 7))
	src := workflowtest.RandomDefinition(r, "rnd", "")
	def, err := Parse([]byte(src))
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	h := start(t, def, workflowtest.RandomInput(r))
	rules := historyDef(t, def)
	check := func() {
		t.Helper()
		comps := 0
		for _, row := range h.rows {
			if row.State == StepPending && row.CompensationOf != "" {
				comps++
			}
		}
		if comps > 1 {
			t.Fatalf("%d compensations at once\n%s", comps, src)
		}
		for _, task := range h.last.Enqueue {
			s := def.Step(task.StepID)
			if s.Compensation {
				continue
			}
			for _, n := range s.Needs {
				if !needAllows(h, def, s, n) {
					t.Fatalf("step %s started while %s is %+v\n%s", s.ID, n, h.rows[rowKey{n, 0}], src)
				}
			}
		}
		if _, err := workflowtest.Check(rules, h.history()); err != nil {
			t.Fatalf("%v\nevents %v\n%s", err, h.eventTypes(), src)
		}
		if w := h.last.WakeAt; !w.IsZero() && !w.After(h.now) {
			t.Fatalf("wake at %s, not after now %s\n%s", w, h.now, src)
		}
		seen.whenErrorSkips += len(h.last.SkippedOnWhenError)
		for _, r := range h.last.Steps {
			if r.State == StepWaiting {
				seen.waiting++
			}
		}
		for _, id := range h.last.SkippedOnWhenError {
			if s := def.Step(id); s.OnWhenError != WhenErrorFalse || h.rows[rowKey{id, 0}].State != StepSkipped {
				t.Fatalf("step %s listed as skipped on a when error: %+v\n%s", id, h.rows[rowKey{id, 0}], src)
			}
		}
	}
	check()
	// Cancels come at random moments (while steps run, while the run
	// compensates); a task the cancel finds waiting is canceled at once,
	// a running one settles later (it stops, or it finished anyway).
	cancelAt := map[int]bool{}
	if r.IntN(3) == 0 {
		cancelAt[r.IntN(8)] = true
		if r.IntN(3) == 0 {
			cancelAt[r.IntN(12)] = true
		}
	}
	asked := map[string]bool{}
	cancel := func() {
		p := h.cancel()
		check()
		var waiting []Change
		for _, id := range p.Cancel {
			if r.IntN(2) == 0 {
				waiting = append(waiting, Change{TaskID: id, Outcome: Canceled, Error: "its run was canceled"})
			} else {
				asked[id] = true
			}
		}
		if len(waiting) > 0 {
			h.advance(waiting...)
			check()
		}
	}
	for i := 0; i < 500; i++ {
		h.now = h.now.Add(time.Duration(r.IntN(90)) * time.Second)
		if w := h.last.WakeAt; !w.IsZero() && r.IntN(4) == 0 {
			// The caller's wake-up: no task settled by the deadline.
			h.now = w
			if p := h.advance(); !p.Empty() {
				seen.woken++
			}
			check()
			continue
		}
		if cancelAt[i] && !Terminal(h.run.State) {
			cancel()
			continue
		}
		pend := h.pending()
		if len(pend) == 0 {
			if h.run.State == RunFailed || h.run.State == RunCompensationFailed {
				if r.IntN(3) == 0 {
					break // left for an operator
				}
				if r.IntN(4) == 0 {
					cancel()
					continue
				}
				var dead []string
				for _, row := range h.rows {
					if (row.State == StepFailed || row.State == StepCanceled) && row.TaskID != "" {
						dead = append(dead, row.TaskID)
					}
				}
				slices.Sort(dead)
				if len(dead) == 0 {
					break
				}
				h.resume(dead[r.IntN(len(dead))])
				check()
				continue
			}
			break
		}
		// Steps run concurrently for random durations: any pending task
		// may settle next.
		id := pend[r.IntN(len(pend))]
		switch n := r.IntN(8); {
		case asked[id] && n < 4:
			h.advance(Change{TaskID: id, Outcome: Canceled, Error: "canceled by operator"})
		case n < 2:
			h.die(id, "boom")
		default:
			h.succeed(id, `1`)
		}
		check()
	}
	if len(h.pending()) != 0 || !Terminal(h.run.State) {
		t.Fatalf("run %s with pending %v\n%s", h.run.State, h.pending(), src)
	}
	failed := h.hasEvent(EventStepFailed, "")
	if !failed && len(cancelAt) == 0 && h.run.State != RunSucceeded {
		t.Fatalf("no failure, run %s\n%s", h.run.State, src)
	}
	if h.run.State == RunCanceling {
		t.Fatalf("run canceling with nothing pending\n%s", src)
	}
	for _, row := range h.rows {
		if row.State == StepFailed && row.TaskID == "" && contains(row.Error, "budget") {
			seen.budgetFailed++
			break
		}
	}
	if Finished(h.run.State) {
		for _, row := range h.rows {
			if row.State == StepWaiting {
				t.Fatalf("run %s with item %s.%d waiting\n%s", h.run.State, row.StepID, row.Item, src)
			}
		}
	}
}

// historyDef is def as the history checker reads it.
func historyDef(t *testing.T, def *Definition) workflowtest.Def {
	t.Helper()
	d, err := workflowtest.DefOf(def)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// needAllows: step s may start while need n is in its current state.
func needAllows(h *harness, def *Definition, s *Step, n string) bool {
	st, _ := h.engineStatus(n)
	switch st {
	case stSucceeded:
		return true
	case stSkipped:
		for _, o := range def.Steps {
			if o.RouteTarget() == n {
				ost, _ := h.engineStatus(o.ID)
				return ost == stSucceeded
			}
		}
	case stFailed:
		rt := def.Step(n).RouteTarget()
		return rt != "" && slices.Contains(s.Needs, rt)
	}
	return false
}

func (h *harness) engineStatus(step string) (status, any) {
	e := newEngine(h.def, nil, h.run, h.stepRows(), frozen)
	st, _ := e.status(step)
	return st, nil
}
