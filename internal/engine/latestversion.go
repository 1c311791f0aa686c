package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
)

// A start of a workflow's latest version plans from the version the
// process last saw as the latest, held in e.latest, instead of reading it
// in a round trip of its own. The run insert is conditional on that
// version still being the latest when it runs (store.RunRecord.Latest):
// a version registered since, by this process (which updates the cache as
// it registers) or another (which it cannot see), fails the start's write,
// and the start reads the latest again and plans again.

// staleStarts bounds how many times one start plans again because a newer
// version was registered meanwhile.
const staleStarts = 8

// LatestWorkflow is the latest registered version of name and its parsed
// definition: the process's cached one, else read from the store (and
// cached). Unknown: the store's ErrNotFound. The version may have been
// superseded by another process; a write with RunRecord.Latest finds out.
func (e *Engine) LatestWorkflow(ctx context.Context, name string) (*store.WorkflowDef, *workflow.Definition, error) {
	if v, ok := e.latest.Load(name); ok {
		d := v.(*store.WorkflowDef)
		def, err := e.PlanOf(d)
		return d, def, err
	}
	d, err := e.store.GetWorkflow(ctx, name, 0)
	if err != nil {
		return nil, nil, err
	}
	def, err := e.PlanOf(d)
	if err != nil {
		return nil, nil, err
	}
	e.RememberLatest(d)
	return d, def, nil
}

// RememberLatest caches d as its workflow's latest version, unless the
// cache holds a later one already.
func (e *Engine) RememberLatest(d *store.WorkflowDef) {
	for {
		v, loaded := e.latest.LoadOrStore(d.Name, d)
		if !loaded {
			return
		}
		if old := v.(*store.WorkflowDef); old.Version >= d.Version || e.latest.CompareAndSwap(d.Name, old, d) {
			return
		}
	}
}

// StartLatest starts a run of the latest version of name in a transaction
// of its own (StartRun): plan makes the run's plan from the version and
// its definition. The run is written only while that version is the
// latest; when a later one was registered, the start reads it and plans
// again. It answers the version started and its plan.
func (e *Engine) StartLatest(ctx context.Context, name string, plan func(*store.WorkflowDef, *workflow.Definition) (workflow.Plan, error), eff *RunEffects) (*store.WorkflowDef, workflow.Plan, error) {
	for range staleStarts {
		d, def, err := e.LatestWorkflow(ctx, name)
		if err != nil {
			return nil, workflow.Plan{}, err
		}
		p, err := plan(d, def)
		if err != nil {
			return nil, workflow.Plan{}, err
		}
		p.Run.Latest = true
		err = e.StartRun(ctx, p, eff)
		if errors.Is(err, store.ErrStaleVersion) {
			e.latest.CompareAndDelete(name, d)
			continue
		}
		return d, p, err
	}
	// A conflict (the caller may retry), but not the run's: it names the
	// stale version too, so a start with a run id is not told that run
	// exists (it does not).
	return nil, workflow.Plan{}, fmt.Errorf("backstop: workflow %q: %w during each of %d attempts to start a run: %w", name, store.ErrStaleVersion, staleStarts, store.ErrConflict)
}
