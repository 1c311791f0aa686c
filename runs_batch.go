package backstop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
)

// A batch start (docs/workflows.md, "Starting many runs"): what EnqueueMany
// is for tasks, RunWorkflows is for runs — every run of the batch, its first
// steps' rows and tasks and its events, in one transaction, all or nothing.

// RunWorkflows starts many runs in one transaction: all or nothing. Each
// item is a RunWorkflow's (its workflow and version — workflows and
// versions may be mixed —, input, run id, trace); the answers are in the
// items' order.
//
// The whole batch is checked before anything is written: a bad item is a
// *BatchError naming its 0-based index, wrapping the item's error (a
// ValidationError naming the field, ErrNotFound for a workflow or version
// that is not registered). The same run id twice in the batch is a
// ValidationError (run_id) at the second. A run id that exists fails the
// batch with ErrConflict, as RunWorkflow does, and as a taken task id fails
// EnqueueMany: a *BatchError naming the first such item, nothing written.
// A caller's own run ids make a batch idempotent as a whole: a batch sent
// again after it committed fails with that conflict, and writes nothing.
//
// A start of the latest version (Version 0) is written only while the
// version it planned from is the latest, as RunWorkflow's: if a later one
// was registered meanwhile, the whole batch is planned again.
func (c *Client) RunWorkflows(ctx context.Context, ps []RunWorkflowParams) ([]RunStarted, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	starts, err := c.batchStarts(ps)
	if err != nil {
		return nil, err
	}
	var eff engine.RunEffects
	ds, plans, err := c.e.StartRuns(ctx, starts, &eff)
	if err != nil {
		return nil, c.batchConflict(err)
	}
	c.e.AfterRuns(ctx, &eff)
	return runsStarted(ds, plans), nil
}

// RunWorkflowsTx is RunWorkflows inside the caller's transaction tx of the
// store's driver (as RunWorkflowTx): the runs exist if and only if the
// caller commits. A start of the latest version reads it from the store
// (no retry is possible in the caller's transaction). The caller must not
// use tx after an error but roll it back.
func RunWorkflowsTx[TX any](ctx context.Context, c *Client, ts store.TxStore[TX], tx TX, ps []RunWorkflowParams) ([]RunStarted, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	starts, err := c.batchStarts(ps)
	if err != nil {
		return nil, err
	}
	// Counted when the caller's transaction is handed back: a rollback
	// after this still counts (the library cannot see the commit).
	var eff engine.RunEffects
	ds, plans, err := c.e.StartRunsTx(ctx, store.Bind(ts, tx), starts, &eff)
	if err != nil {
		return nil, c.batchConflict(err)
	}
	c.e.AfterRuns(ctx, &eff)
	return runsStarted(ds, plans), nil
}

// ValidateRuns checks a batch start's items as RunWorkflows does before it
// reads or writes anything (input and its size, run id, workflow name,
// version, a run id given twice: a *BatchError naming the item), without
// starting them. Whether the workflows and versions are registered and the
// run ids free is for the start to find.
func (c *Client) ValidateRuns(ps ...RunWorkflowParams) error {
	return checkRunBatch(ps, c.cfg.MaxPayloadSize, nil)
}

// CheckRuns is ValidateRuns without a client: every check but the input's
// size, which is the client's (or the server's) configuration.
func CheckRuns(ps ...RunWorkflowParams) error {
	return checkRunBatch(ps, 0, nil)
}

// batchStarts checks every item of a batch start before anything is read
// or written, and makes the engine's starts of them.
func (c *Client) batchStarts(ps []RunWorkflowParams) ([]engine.RunStart, error) {
	starts := make([]engine.RunStart, len(ps))
	err := checkRunBatch(ps, c.cfg.MaxPayloadSize, func(i int, input json.RawMessage, runID string) {
		p := ps[i]
		starts[i] = engine.RunStart{Workflow: p.Workflow, Version: p.Version, Trace: p.Trace,
			Plan: func(d *WorkflowVersion, def *workflow.Definition) (workflow.Plan, error) {
				return c.planStart(def, d, runID, input)
			}}
	})
	if err != nil {
		return nil, err
	}
	return starts, nil
}

// checkRunBatch checks each item (its input, bounded by maxInput when
// positive, run id, workflow name and version; a run id given twice) and
// hands each good one's input and run id (a new one when not given) to
// each, if not nil.
func checkRunBatch(ps []RunWorkflowParams, maxInput int, each func(i int, input json.RawMessage, runID string)) error {
	seen := make(map[string]int, len(ps))
	for i, p := range ps {
		bad := func(err error) error { return &BatchError{Index: i, Err: err, Of: "run"} }
		input, runID, err := startParamsOf(p, maxInput)
		if err != nil {
			return bad(err)
		}
		if err := workflow.ValidName(p.Workflow); err != nil {
			return bad(invalid("workflow", "%v", err))
		}
		if p.Version < 0 {
			return bad(invalid("version", "must not be negative"))
		}
		if p.RunID != "" {
			if first, dup := seen[p.RunID]; dup {
				return bad(invalid("run_id", "%q is also run %d of the batch (a run id may be given once)", p.RunID, first+1))
			}
			seen[p.RunID] = i
		}
		if each != nil {
			each(i, input, runID)
		}
	}
	return nil
}

// batchConflict says which run of a batch exists (a *BatchError with the
// store's RunExistsError): ErrConflict naming the run and that nothing of
// the batch was written.
func (c *Client) batchConflict(err error) error {
	var be *BatchError
	var re *store.RunExistsError
	if errors.As(err, &be) && errors.As(err, &re) {
		return &BatchError{Index: be.Index, Of: "run",
			Err: fmt.Errorf("run %q already exists (nothing of the batch was written): %w", re.RunID, ErrConflict)}
	}
	return err
}

// runsStarted is a batch start's answer.
func runsStarted(ds []*WorkflowVersion, plans []workflow.Plan) []RunStarted {
	out := make([]RunStarted, len(plans))
	for i, p := range plans {
		out[i] = RunStarted{RunID: p.Run.RunID, Workflow: ds[i].Name, Version: ds[i].Version, PlanHash: ds[i].PlanHash, State: p.Run.State}
	}
	return out
}
