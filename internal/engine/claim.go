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
	return e.claimAdmitted(ctx, p)
}

// claimAdmitted is Claim after the queue's ordering admission.
func (e *Engine) claimAdmitted(ctx context.Context, p ClaimParams) (tasks []*Task, bad map[*Task]error, err error) {
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

// CanSettleClaim reports whether SettleClaim would settle a batch and
// claim the next tasks of queue in one store transaction: the store can
// (store.SettleClaimer) and the queue takes the plain claim (neither
// ordered, limited nor fair). A worker hands its finished batches to
// SettleClaim only then.
func (e *Engine) CanSettleClaim(ctx context.Context, queue string) bool {
	if _, ok := e.store.(store.SettleClaimer); !ok || e.Ordered(queue) {
		return false
	}
	set := e.settings(ctx) // claimsettings.go
	return !set.limited(queue) && !set.fair(queue)
}

// SettleClaim settles ss and claims up to p.Max tasks of p.Queue: in one
// store transaction where the store can (store.SettleClaimer) and both are
// the plain kind — no workflow step and no task of an ordered queue among
// ss, p.Queue neither ordered, limited nor fair; otherwise Settle, then
// Claim. Either way ss reach the store through the one settle seam's
// checks (SettleSeen) and the claimed tasks get Claim's telemetry and
// payloads. An error with oks nil: nothing was settled nor claimed; with
// oks set (a separate settle, then a claim that failed): the batch settled
// and nothing was claimed.
func (e *Engine) SettleClaim(ctx context.Context, ss []store.Settlement, p ClaimParams) (oks []bool, tasks []*Task, bad map[*Task]error, err error) {
	sc, ok := e.store.(store.SettleClaimer)
	if p.Max > 0 {
		if err := e.OrderQueue(ctx, p.Queue); err != nil { // as Claim does
			e.cfg.Logger.Error("ordering failed", "queue", p.Queue, "error", err)
		}
	}
	set := e.settings(ctx) // claimsettings.go
	if !ok || p.Max <= 0 || mayBeSteps(ss) || e.mayEndOrdered(ss) || e.Ordered(p.Queue) ||
		set.limited(p.Queue) || set.fair(p.Queue) {
		if oks, err = e.Settle(ctx, ss); err != nil {
			return nil, nil, nil, err
		}
		if p.Max <= 0 {
			return oks, nil, nil, nil
		}
		tasks, bad, err = e.claimAdmitted(ctx, p)
		return oks, tasks, bad, err
	}
	if e.SettleSeen != nil {
		e.SettleSeen(ss)
	}
	oks, tasks, err = sc.SettleClaim(ctx, ss, store.ClaimParams{Queue: p.Queue, Kinds: p.Kinds, WorkerID: p.WorkerID,
		Max: p.Max, Now: e.Now(), Lease: p.Lease})
	e.Telemetry.claimed(ctx, p.Queue, tasks, err, e.Now())
	if err != nil {
		return nil, nil, nil, err
	}
	e.Telemetry.claimedEvents(ctx, tasks, p.WorkerID, e.Now())
	return oks, tasks, e.stepInputs(ctx, tasks), nil
}
