package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
)

// A batch start writes many runs in one transaction: every run row, its
// first steps' rows and tasks, and their events go in one WritePlan (on
// Postgres one pipeline with the COMMIT), so a batch costs one durable
// commit where as many single starts cost one each. All or nothing: a run
// the batch cannot plan or write fails the batch, and nothing is written.

// RunStart is one run of a batch start.
type RunStart struct {
	Workflow string
	// Version: 0 starts the latest.
	Version int
	// Plan makes the run's plan from the version and its definition.
	Plan func(*store.WorkflowDef, *workflow.Definition) (workflow.Plan, error)
	// Trace forces the run's trace to be sampled (ForceTrace, for this run
	// of the batch).
	Trace bool
}

// StartRuns starts the runs of starts in one transaction of its own and
// answers each one's version and plan, in order. A start of the latest
// version plans from the cached latest (LatestWorkflow) and is written
// only while that version is the latest (RunRecord.Latest); when any was
// superseded, the whole batch reads the latest again and plans again, as
// StartLatest does for one run. An error that belongs to one start is a
// *BatchError naming it (its version or plan refused, its run id taken).
func (e *Engine) StartRuns(ctx context.Context, starts []RunStart, eff *RunEffects) ([]*store.WorkflowDef, []workflow.Plan, error) {
	for range staleStarts {
		ds, plans, err := e.planRuns(ctx, starts, true)
		if err != nil {
			return nil, nil, err
		}
		err = e.writeRuns(ctx, nil, starts, plans, eff)
		if errors.Is(err, store.ErrStaleVersion) {
			for i, s := range starts {
				if s.Version == 0 {
					e.latest.CompareAndDelete(s.Workflow, ds[i])
				}
			}
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		return ds, plans, nil
	}
	return nil, nil, fmt.Errorf("backstop: a batch of %d runs: %w during each of %d attempts to start it: %w", len(starts), store.ErrStaleVersion, staleStarts, store.ErrConflict)
}

// StartRunsTx starts the runs of starts in tx, the caller's: the latest
// version is read from the store (no cached version, no retry: a stale
// write could not be retried in a transaction that must then roll back).
func (e *Engine) StartRunsTx(ctx context.Context, tx store.Tx, starts []RunStart, eff *RunEffects) ([]*store.WorkflowDef, []workflow.Plan, error) {
	ds, plans, err := e.planRuns(ctx, starts, false)
	if err != nil {
		return nil, nil, err
	}
	if err := e.writeRuns(ctx, tx, starts, plans, eff); err != nil {
		return nil, nil, err
	}
	return ds, plans, nil
}

// planRuns resolves each start's version (each distinct workflow and
// version read once) and plans it. cached: a start of the latest plans
// from the process's cached latest and is written conditionally (Latest).
func (e *Engine) planRuns(ctx context.Context, starts []RunStart, cached bool) ([]*store.WorkflowDef, []workflow.Plan, error) {
	type key struct {
		name    string
		version int
	}
	type resolved struct {
		d   *store.WorkflowDef
		def *workflow.Definition
	}
	seen := map[key]resolved{}
	ds := make([]*store.WorkflowDef, len(starts))
	plans := make([]workflow.Plan, len(starts))
	for i, s := range starts {
		k := key{s.Workflow, s.Version}
		r, ok := seen[k]
		if !ok {
			var err error
			switch {
			case s.Version == 0 && cached:
				r.d, r.def, err = e.LatestWorkflow(ctx, s.Workflow)
			default:
				r.d, err = e.store.GetWorkflow(ctx, s.Workflow, s.Version)
				if err == nil {
					r.def, err = e.PlanOf(r.d)
				}
			}
			if errors.Is(err, store.ErrNotFound) {
				if s.Version == 0 {
					err = fmt.Errorf("workflow %q is not registered: %w", s.Workflow, ErrNotFound)
				} else {
					err = fmt.Errorf("workflow %q has no version %d: %w", s.Workflow, s.Version, ErrNotFound)
				}
			}
			if err != nil {
				return nil, nil, &BatchError{Index: i, Err: err, Of: "run"}
			}
			seen[k] = r
		}
		p, err := s.Plan(r.d, r.def)
		if err != nil {
			return nil, nil, &BatchError{Index: i, Err: err, Of: "run"}
		}
		p.Run.Latest = s.Version == 0 && cached
		ds[i], plans[i] = r.d, p
	}
	return ds, plans, nil
}

// writeRuns writes the new runs' plans in tx, or (tx nil) in a
// transaction of its own: when no plan needs more than WritePlan (no
// wake-up, dead letter or cancellation), in one store call, on Postgres
// one round trip.
func (e *Engine) writeRuns(ctx context.Context, tx store.Tx, starts []RunStart, plans []workflow.Plan, eff *RunEffects) error {
	add := func(w *planWriter) error {
		*eff = RunEffects{}
		for i := range plans {
			if starts[i].Trace {
				if eff.trace.sampled == nil {
					eff.trace.sampled = map[string]bool{}
				}
				eff.trace.sampled[plans[i].Run.RunID] = true
			}
			if err := e.addPlan(ctx, w, plans[i], true, eff); err != nil {
				return &BatchError{Index: i, Err: err, Of: "run"}
			}
		}
		return nil
	}
	simple := true
	for i := range plans {
		p := &plans[i]
		simple = simple && p.WakeAt.IsZero() && len(p.DeadLetter) == 0 && len(p.Cancel) == 0
	}
	var w planWriter
	var err error
	switch {
	case tx != nil:
		if err = add(&w); err == nil {
			err = e.writePlans(ctx, tx, &w, eff)
		}
	case simple:
		if err = add(&w); err == nil {
			_, err = e.store.WritePlan(ctx, e.planWrite(ctx, &w, true))
		}
	default:
		err = e.store.InTx(ctx, func(tx store.Tx) error {
			w = planWriter{}
			if err := add(&w); err != nil {
				return err
			}
			return e.writePlans(ctx, tx, &w, eff)
		})
	}
	if re := (*store.RunExistsError)(nil); errors.As(err, &re) {
		for i := range plans {
			if plans[i].Run.RunID == re.RunID {
				return &BatchError{Index: i, Err: err, Of: "run"}
			}
		}
	}
	return err
}
