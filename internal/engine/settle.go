package engine

import (
	"context"
	"fmt"

	"github.com/backstophq/backstop/store"
)

// Settle applies settlements to the store: the one place where attempts
// are settled. Every path goes through it: the in-process worker's batches
// and its release on shutdown, the remote protocol (through SettleOne and
// SettleMany, which coalesce concurrent callers) and the maintenance
// services that settle (lease expiry, deadlines). A settlement that
// finishes a workflow step advances its run in the same transaction
// (workflows.go). The answer says, for each settlement, whether it applied
// (false: its lease was no longer current).
func (e *Engine) Settle(ctx context.Context, ss []store.Settlement) ([]bool, error) {
	if e.SettleSeen != nil {
		e.SettleSeen(ss)
	}
	if !mayBeSteps(ss) && e.mayEndOrdered(ss) {
		return e.settleOrdered(ctx, ss) // ordering.go: the freed keys' next turn in the same transaction
	}
	return e.settleSteps(ctx, ss) // workflows.go
}

// SettleOne settles one attempt, coalesced with the settlements other
// callers make at the same time into one Settle: one transaction for many
// attempts (remote workers completing in parallel HTTP requests). actor
// names who reported it; a batch holds one actor's settlements.
func (e *Engine) SettleOne(ctx context.Context, s store.Settlement, actor string) (bool, error) {
	return e.batcher.settle(ctx, e.Settle, s, actor)
}

// SettleMany queues many settlements at once and waits for all; they are
// written with whatever else is pending, at most one per task per batch.
func (e *Engine) SettleMany(ctx context.Context, ss []store.Settlement, actor string) ([]bool, []error) {
	return e.batcher.settleMany(ctx, e.Settle, ss, actor)
}

// settleFunc is Settle's shape, for the batcher.
type settleFunc func(ctx context.Context, ss []store.Settlement) ([]bool, error)

// settleBatcher coalesces settlements that arrive concurrently (remote
// workers completing in parallel HTTP requests) into one Engine.Settle: one
// transaction for many attempts, as the in-process worker's completer does
// (a coalescer, batcher.go). Its zero value is ready.
type settleBatcher struct {
	coalescer[*settleReq]
}

type settleReq struct {
	s     store.Settlement
	actor string // who reported it: the events name them
	ctx   context.Context
	done  chan struct{}
	ok    bool
	err   error
}

// maxSettleBatch bounds one flush.
const maxSettleBatch = 500

func (b *settleBatcher) settle(ctx context.Context, st settleFunc, s store.Settlement, actor string) (bool, error) {
	oks, errs := b.settleMany(ctx, st, []store.Settlement{s}, actor)
	return oks[0], errs[0]
}

// takeSettles picks the next batch from pending: at most one settlement
// per task, so a batch never names a lease twice, and one actor's, whom
// the batch's events name.
func takeSettles(pending []*settleReq) (batch, rest []*settleReq) {
	seen := make(map[string]bool, len(pending))
	actor := pending[0].actor
	for _, r := range pending {
		if seen[r.s.TaskID] || len(batch) >= maxSettleBatch || r.actor != actor {
			rest = append(rest, r)
			continue
		}
		seen[r.s.TaskID] = true
		batch = append(batch, r)
	}
	return batch, rest
}

func flushSettles(st settleFunc, batch []*settleReq) {
	fctx, cancel := batchContext(batch[0].ctx, batch[0].actor)
	defer cancel()
	ss := make([]store.Settlement, len(batch))
	for i, r := range batch {
		ss[i] = r.s
	}
	oks, err := st(fctx, ss)
	if err == nil && len(oks) != len(ss) {
		err = fmt.Errorf("backstop: store settled %d of %d", len(oks), len(ss))
	}
	for i, r := range batch {
		r.err = err
		r.ok = err == nil && oks[i]
		close(r.done)
	}
}

// settleMany queues settlements and waits for all; they are written with
// whatever else is pending.
func (b *settleBatcher) settleMany(ctx context.Context, st settleFunc, ss []store.Settlement, actor string) ([]bool, []error) {
	reqs := make([]*settleReq, len(ss))
	for i, s := range ss {
		reqs[i] = &settleReq{s: s, actor: actor, ctx: ctx, done: make(chan struct{})}
	}
	b.submit(reqs, takeSettles, func(batch []*settleReq) { flushSettles(st, batch) })
	oks, errs := make([]bool, len(ss)), make([]error, len(ss))
	for i, r := range reqs {
		<-r.done
		oks[i], errs[i] = r.ok, r.err
	}
	return oks, errs
}
