package storetest

import (
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
)

// wfWritePlan: WritePlan writes what InsertRun, UpdateRuns, PutSteps,
// Enqueue and AppendEvents would, in that order (the events after the
// tasks' task.enqueued and the enqueue's own events), also past a driver's
// statement sizes (more than 8 step rows and tasks, a spilled payload); a
// run that exists, a task id that exists, a task id another step holds, an
// unknown run to update: the error of the operation, and nothing of the
// plan is written; Store.WritePlan (a transaction of its own) likewise.
func (s *suite) wfWritePlan(t *testing.T) {
	t.Parallel()
	b := s.wfSetup(t)
	const n = 11
	run := wfRun(b, "run-1", "order")
	var steps []store.StepRecord
	var tasks []*bt.Task
	for i := range n {
		id := fmt.Sprintf("run-1.s%02d", i)
		steps = append(steps, wfStep(b, "run-1", fmt.Sprintf("s%02d", i), 0, id, "pending"))
		tasks = append(tasks, newTask(b, id, "wp"))
	}
	big := json.RawMessage(`{"blob":"` + strings.Repeat("x", 600) + `"}`)
	tasks[3].Payload = big
	now := b.clock.Now()
	opsEvent := store.NewEvent(now, "test.too_complex", "run-1.s00", "wp", "k", "engine", []byte(`{}`))
	planEvents := []bt.Event{stepEvent(b, "started"), stepEvent(b, "enqueued")}
	var res []store.EnqueueResult
	inTx(t, b, func(tx store.Tx) error {
		var err error
		res, err = tx.WritePlan(b.ctx, store.PlanWrite{Inserts: []store.RunRecord{run}, Steps: steps, Tasks: tasks,
			Opts: store.EnqueueOpts{InlineLimit: 256, Events: []bt.Event{opsEvent}}, Events: planEvents})
		return err
	})
	if len(res) != n {
		t.Fatalf("%d enqueue results, want %d", len(res), n)
	}
	for i, r := range res {
		if r.Task == nil || r.Task.ID != tasks[i].ID || r.Duplicate || r.Merged {
			t.Fatalf("result %d: %+v, want task %s inserted", i, r, tasks[i].ID)
		}
	}
	got, gotSteps, err := b.store.GetRun(b.ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, "written", got, run)
	want := slices.Clone(steps)
	slices.SortFunc(want, func(a, b store.StepRecord) int { return strings.Compare(a.StepID, b.StepID) })
	checkSteps(t, "written", gotSteps, want)
	for _, tk := range tasks {
		if g := b.get(tk.ID); g.State != bt.StatePending || g.Queue != "wp" {
			t.Fatalf("task %s: %s in %s, want pending in wp", tk.ID, g.State, g.Queue)
		}
	}
	jsonEq(t, "spilled payload", b.get(tasks[3].ID).Payload, big)

	// The log: the tasks' task.enqueued, then the enqueue's event, then
	// the plan's, in that order.
	var types []string
	testwait.For(t, "the plan's events", func() bool {
		page, err := b.store.ReadEvents(b.ctx, store.EventQuery{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		types = types[:0]
		for _, e := range page.Events {
			if e.Type == store.EventEnqueued || strings.HasPrefix(e.Type, "test.") {
				types = append(types, e.Type)
			}
		}
		return len(types) >= n+3
	})
	wantTypes := append(slices.Repeat([]string{store.EventEnqueued}, n), "test.too_complex", "test.step_done", "test.step_done")
	eq(t, "event order", types, wantTypes)

	// Refused: nothing of the plan is written.
	b.clock.Advance(time.Minute)
	upd := run
	upd.State, upd.Seq, upd.UpdatedAt = "failed", 9, b.clock.Now()
	fresh := newTask(b, "run-1.fresh", "wp")
	for _, c := range []struct {
		what string
		w    store.PlanWrite
		is   error
	}{
		{"the run again", store.PlanWrite{Inserts: []store.RunRecord{run}, Tasks: []*bt.Task{fresh}}, store.ErrConflict},
		{"a task id that exists", store.PlanWrite{Updates: []store.RunRecord{upd},
			Tasks: []*bt.Task{fresh, newTask(b, tasks[5].ID, "wp")}}, store.ErrConflict},
		{"a task id another step holds", store.PlanWrite{Updates: []store.RunRecord{upd},
			Steps: []store.StepRecord{wfStep(b, "run-1", "other", 0, tasks[0].ID, "pending")}, Tasks: []*bt.Task{fresh}}, store.ErrConflict},
		{"an unknown run", store.PlanWrite{Updates: []store.RunRecord{upd, wfRun(b, "nope", "order")}, Tasks: []*bt.Task{fresh}}, store.ErrNotFound},
	} {
		err := b.store.InTx(b.ctx, func(tx store.Tx) error {
			_, err := tx.WritePlan(b.ctx, c.w)
			return err
		})
		if !errors.Is(err, c.is) {
			t.Fatalf("%s: %v, want %v", c.what, err, c.is)
		}
		if got, _, err = b.store.GetRun(b.ctx, "run-1"); err != nil {
			t.Fatal(err)
		}
		checkRun(t, c.what, got, run)
		if _, err := b.c.Get(b.ctx, fresh.ID); err == nil {
			t.Fatalf("%s: task %s was written", c.what, fresh.ID)
		}
	}
	// In a transaction of its own (a run's start): the same, all or
	// nothing.
	run2 := wfRun(b, "run-2", "order")
	step2 := wfStep(b, "run-2", "a", 0, "run-2.a", "pending")
	started := store.PlanWrite{Inserts: []store.RunRecord{run2}, Steps: []store.StepRecord{step2},
		Tasks: []*bt.Task{newTask(b, "run-2.a", "wp")}, Events: []bt.Event{stepEvent(b, "run-2")}}
	for _, c := range []struct {
		what string
		w    store.PlanWrite
		is   error
	}{
		{"a run that exists", store.PlanWrite{Inserts: []store.RunRecord{run}, Tasks: []*bt.Task{fresh}}, store.ErrConflict},
		{"a task id that exists", store.PlanWrite{Inserts: []store.RunRecord{run2}, Steps: []store.StepRecord{step2},
			Tasks: []*bt.Task{newTask(b, "run-2.a", "wp"), newTask(b, tasks[7].ID, "wp")}}, store.ErrConflict},
		{"a task id twice", store.PlanWrite{Inserts: []store.RunRecord{run2},
			Tasks: []*bt.Task{newTask(b, "run-2.a", "wp"), newTask(b, "run-2.a", "wp")}}, store.ErrConflict},
		{"a task id another step holds", store.PlanWrite{Inserts: []store.RunRecord{run2},
			Steps: []store.StepRecord{wfStep(b, "run-2", "a", 0, tasks[0].ID, "pending")}, Tasks: []*bt.Task{newTask(b, "run-2.a", "wp")}}, store.ErrConflict},
	} {
		if _, err := b.store.WritePlan(b.ctx, c.w); !errors.Is(err, c.is) {
			t.Fatalf("alone, %s: %v, want %v", c.what, err, c.is)
		}
		if _, _, err := b.store.GetRun(b.ctx, "run-2"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("alone, %s: run-2 was written (%v)", c.what, err)
		}
		for _, id := range []string{"run-2.a", fresh.ID} {
			if _, err := b.c.Get(b.ctx, id); err == nil {
				t.Fatalf("alone, %s: task %s was written", c.what, id)
			}
		}
	}
	res, err = b.store.WritePlan(b.ctx, started)
	if err != nil || len(res) != 1 || res[0].Task.ID != "run-2.a" {
		t.Fatalf("alone: %v, %v", res, err)
	}
	if got, gotSteps, err = b.store.GetRun(b.ctx, "run-2"); err != nil {
		t.Fatal(err)
	}
	checkRun(t, "alone", got, run2)
	checkSteps(t, "alone", gotSteps, []store.StepRecord{step2})
	if g := b.get("run-2.a"); g.State != bt.StatePending {
		t.Fatalf("alone: task run-2.a %s, want pending", g.State)
	}

	// An empty plan writes nothing and fails nothing.
	inTx(t, b, func(tx store.Tx) error {
		_, err := tx.WritePlan(b.ctx, store.PlanWrite{})
		return err
	})
	if _, err := b.store.WritePlan(b.ctx, store.PlanWrite{}); err != nil {
		t.Fatal(err)
	}
}
