package storetest

import (
	"errors"
	"fmt"
	"testing"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// wfWriteLatest: a run insert with Latest writes while its version is the
// workflow's latest; once a later version is registered (or when none is),
// InsertRun and WritePlan, in a transaction and alone, pipelined or not,
// fail with ErrStaleVersion and write nothing of the plan. A run read back
// has Latest false.
func (s *suite) wfWriteLatest(t *testing.T) {
	t.Parallel()
	b := s.wfSetup(t)
	v1, _ := wfPut(t, b, wfDef(b, "lw", "h1"))
	start := func(id string, v store.WorkflowDef, steps int) store.PlanWrite {
		r := wfRun(b, id, "lw")
		r.Version, r.PlanHash, r.Latest = v.Version, v.PlanHash, true
		w := store.PlanWrite{Inserts: []store.RunRecord{r}, Tasks: []*bt.Task{newTask(b, id+".a", "lw")},
			Events: []bt.Event{stepEvent(b, id)}}
		for i := range steps {
			w.Steps = append(w.Steps, wfStep(b, id, fmt.Sprintf("s%03d", i), 0, fmt.Sprintf("%s.s%03d", id, i), "pending"))
		}
		return w
	}
	written := func(what, id string, want store.WorkflowDef) {
		t.Helper()
		got, _, err := b.store.GetRun(b.ctx, id)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got.Version != want.Version || got.PlanHash != want.PlanHash || got.Latest {
			t.Fatalf("%s: run %s of version %d (%s), latest %v; want version %d (%s), latest false", what, id,
				got.Version, got.PlanHash, got.Latest, want.Version, want.PlanHash)
		}
		if g := b.get(id + ".a"); g.State != bt.StatePending {
			t.Fatalf("%s: task %s.a %s, want pending", what, id, g.State)
		}
	}
	if _, err := b.store.WritePlan(b.ctx, start("lw-1", v1, 1)); err != nil {
		t.Fatal(err)
	}
	written("the latest, alone", "lw-1", v1)
	inTx(t, b, func(tx store.Tx) error {
		_, err := tx.WritePlan(b.ctx, start("lw-2", v1, 70)) // over a pipeline's rows: statement by statement
		return err
	})
	written("the latest, in a transaction", "lw-2", v1)

	v2, _ := wfPut(t, b, wfDef(b, "lw", "h2"))
	never := start("lw-x", v1, 1)
	never.Inserts[0].Workflow = "unregistered"
	for _, c := range []struct {
		what  string
		w     store.PlanWrite
		write func(store.PlanWrite) error
	}{
		{"alone", start("lw-3", v1, 1), func(w store.PlanWrite) error { _, err := b.store.WritePlan(b.ctx, w); return err }},
		{"alone, statement by statement", start("lw-3", v1, 70), func(w store.PlanWrite) error { _, err := b.store.WritePlan(b.ctx, w); return err }},
		{"in a transaction", start("lw-3", v1, 1), func(w store.PlanWrite) error {
			return b.store.InTx(b.ctx, func(tx store.Tx) error { _, err := tx.WritePlan(b.ctx, w); return err })
		}},
		{"InsertRun", start("lw-3", v1, 0), func(w store.PlanWrite) error {
			return b.store.InTx(b.ctx, func(tx store.Tx) error { return tx.InsertRun(b.ctx, w.Inserts[0]) })
		}},
		{"a workflow never registered", never, func(w store.PlanWrite) error { _, err := b.store.WritePlan(b.ctx, w); return err }},
	} {
		if err := c.write(c.w); !errors.Is(err, store.ErrStaleVersion) {
			t.Fatalf("%s, a stale version: %v, want ErrStaleVersion", c.what, err)
		}
		id := c.w.Inserts[0].RunID
		if _, _, err := b.store.GetRun(b.ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("%s, a stale version: run %s was written (%v)", c.what, id, err)
		}
		if _, err := b.c.Get(b.ctx, id+".a"); err == nil {
			t.Fatalf("%s, a stale version: task %s.a was written", c.what, id)
		}
	}
	if _, err := b.store.WritePlan(b.ctx, start("lw-3", v2, 1)); err != nil {
		t.Fatal(err)
	}
	written("the new latest", "lw-3", v2)
	// Registering v1's definition again makes it the latest as version 3:
	// version 1 is stale although its hash is the latest's.
	v3, _ := wfPut(t, b, wfDef(b, "lw", "h1"))
	if _, err := b.store.WritePlan(b.ctx, start("lw-4", v1, 1)); !errors.Is(err, store.ErrStaleVersion) {
		t.Fatalf("version 1 after its definition was registered again: %v, want ErrStaleVersion", err)
	}
	if _, err := b.store.WritePlan(b.ctx, start("lw-4", v3, 1)); err != nil {
		t.Fatal(err)
	}
	written("a definition registered again", "lw-4", v3)
}
