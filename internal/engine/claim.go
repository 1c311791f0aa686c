package engine

import (
	"context"
	"time"

	"github.com/backstophq/backstop/store"
)

// ClaimParams asks for claimable tasks of one queue.
type ClaimParams struct {
	Queue    string
	Kinds    []string // empty: any kind
	WorkerID string
	Max      int
	Lease    time.Duration
}

// Claim is the one claim path, for the in-process worker and the remote
// protocol alike: the queue's ordering admission (the tasks whose turn has
// come are released from the buffer), the store's claim (within the
// queue's limits when it has any, fair when it is fair: limits.go,
// fair.go), the claimed
// tasks' ordering fields, their telemetry, and their payloads completed
// with their workflow run's input. bad holds the tasks whose payload could
// not be completed: they must fail without reaching their work (Decide
// with the error, then Settle).
func (e *Engine) Claim(ctx context.Context, p ClaimParams) (tasks []*Task, bad map[*Task]error, err error) {
	if err := e.OrderQueue(ctx, p.Queue); err != nil { // ordering.go
		e.cfg.Logger.Error("ordering failed", "queue", p.Queue, "error", err)
	}
	set := e.settings(ctx) // claimsettings.go
	tasks, err = e.store.Claim(ctx, store.ClaimParams{Queue: p.Queue, Kinds: p.Kinds, WorkerID: p.WorkerID,
		Max: p.Max, Now: e.Now(), Lease: p.Lease, Limited: set.limited(p.Queue), Fair: set.fair(p.Queue)})
	e.Telemetry.claimed(ctx, p.Queue, tasks, err, e.Now())
	if err != nil {
		return nil, nil, err
	}
	e.Telemetry.claimedEvents(ctx, tasks, p.WorkerID, e.Now())
	e.attachOrdering(ctx, p.Queue, tasks) // ordering.go
	return tasks, e.stepInputs(ctx, tasks), nil
}
