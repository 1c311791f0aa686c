package engine

import (
	"context"
	"fmt"

	"github.com/backstophq/backstop/store"
)

// EnqueueOne writes one prepared task (its opts from EnqueueOpts),
// coalesced with the single enqueues other callers make at the same time
// into one store.Enqueue: one transaction, one commit and one wake-up for
// many producers (group commit). A caller alone is written at once. Each
// caller gets its own result and error: the store resolves a batch task for
// task as it would one at a time (idempotency keys, merges, spills,
// ordering and events unchanged), and when a coalesced batch fails, each
// of its tasks is enqueued again on its own, so a task that cannot be
// written (a taken id) fails only its caller. An enqueue in the caller's
// transaction (store.EnqueueTx) is never coalesced.
func (e *Engine) EnqueueOne(ctx context.Context, t *Task, opts store.EnqueueOpts) (store.EnqueueResult, error) {
	if err := ctx.Err(); err != nil {
		return store.EnqueueResult{}, err
	}
	r := &enqueueReq{ctx: ctx, actor: store.ActorFrom(ctx, store.DefaultActor), task: t, opts: opts, done: make(chan struct{})}
	e.enqueues.submit([]*enqueueReq{r}, takeEnqueues, e.flushEnqueues)
	<-r.done
	return r.res, r.err
}

type enqueueReq struct {
	ctx   context.Context
	actor string // who enqueues: the events name them
	task  *Task
	opts  store.EnqueueOpts
	done  chan struct{}
	res   store.EnqueueResult
	err   error
}

// maxEnqueueBatch bounds one coalesced enqueue.
const maxEnqueueBatch = 1000

// takeEnqueues picks the next batch from pending: one actor's enqueues,
// whom the batch's events name, in the order they came.
func takeEnqueues(pending []*enqueueReq) (batch, rest []*enqueueReq) {
	actor := pending[0].actor
	for _, r := range pending {
		if len(batch) >= maxEnqueueBatch || r.actor != actor {
			rest = append(rest, r)
			continue
		}
		batch = append(batch, r)
	}
	return batch, rest
}

// flushEnqueues writes a batch in one store.Enqueue; if that fails, each
// task on its own.
func (e *Engine) flushEnqueues(batch []*enqueueReq) {
	defer func() {
		for _, r := range batch {
			close(r.done)
		}
	}()
	if len(batch) == 1 { // the caller's own context: its cancellation applies
		r := batch[0]
		r.res, r.err = e.enqueueAlone(r.ctx, r)
		return
	}
	ctx, cancel := batchContext(batch[0].ctx, batch[0].actor)
	defer cancel()
	tasks := make([]*Task, len(batch))
	opts := store.EnqueueOpts{InlineLimit: batch[0].opts.InlineLimit, Merge: batch[0].opts.Merge}
	for i, r := range batch {
		tasks[i] = r.task
		opts.Events = append(opts.Events, r.opts.Events...)
		if d := r.opts.DebounceOf(0); d.Debounced {
			if opts.Debounce == nil {
				opts.Debounce = make([]store.Debounce, len(batch))
			}
			opts.Debounce[i] = d
		}
	}
	rs, err := e.store.Enqueue(ctx, tasks, opts)
	if err == nil && len(rs) != len(tasks) {
		err = fmt.Errorf("backstop: store enqueued %d of %d", len(rs), len(tasks))
	}
	if err == nil {
		for i, r := range batch {
			r.res = rs[i]
		}
		return
	}
	// Nothing of the batch was written: each task again, alone, so one
	// that cannot be written fails only its caller.
	for _, r := range batch {
		rctx, cancel := batchContext(r.ctx, r.actor)
		r.res, r.err = e.enqueueAlone(rctx, r)
		cancel()
	}
}

func (e *Engine) enqueueAlone(ctx context.Context, r *enqueueReq) (store.EnqueueResult, error) {
	rs, err := e.store.Enqueue(ctx, []*Task{r.task}, r.opts)
	if err == nil && len(rs) != 1 {
		err = fmt.Errorf("backstop: store enqueued %d of 1", len(rs))
	}
	if err != nil {
		return store.EnqueueResult{}, err
	}
	return rs[0], nil
}
