package backstop

import (
	"context"
	"errors"

	"github.com/backstophq/backstop/internal/remote"
	"github.com/backstophq/backstop/store"
)

// completeManyRemote is remote.Protocol.CompleteMany.
func (c *Client) completeManyRemote(ctx context.Context, cs []remote.Completion) ([]remote.Outcome, error) {
	out := make([]remote.Outcome, len(cs))
	var ss []store.Settlement
	var idx []int
	for i, x := range cs {
		if err := checkLease(x.TaskID, x.LeaseToken); err != nil {
			out[i].Err = err
			continue
		}
		if err := validProgress(x.Progress); err != nil {
			out[i].Err = err
			continue
		}
		result, err := CheckResult(x.Result)
		if err != nil {
			out[i].Err = err
			continue
		}
		exec, err := c.leaseOf(ctx, x.TaskID, x.LeaseToken)
		if errors.Is(err, remote.ErrLeaseNotCurrent) || errors.Is(err, ErrNotFound) {
			out[i].Err = err
			continue
		}
		if err != nil {
			return nil, err // the store failed: the caller retries the batch
		}
		t := &Task{ID: x.TaskID, ExecutionID: exec}
		s := c.remoteDecide(t, nil, nil, x.Progress, "")
		s.Result = result
		ss = append(ss, s)
		idx = append(idx, i)
	}
	oks, errs := c.remote.settleMany(ctx, c.settle, ss, ActorFrom(ctx))
	for j, i := range idx {
		s := ss[j]
		switch {
		case errs[j] != nil:
			return nil, errs[j] // the store failed: the caller retries the batch
		case !oks[j]:
			out[i].Err = c.leaseError(ctx, s.TaskID)
		default:
			out[i].Result = &remote.Result{TaskID: s.TaskID, Outcome: s.Outcome, State: s.State, DeadReason: s.DeadReason}
			out[i].Result.Span = c.remoteSettled(ctx, nil, &ss[j])
		}
	}
	return out, nil
}

// settleMany queues many settlements at once and waits for all; the
// batcher writes them (and whatever else is pending) together.
func (b *settleBatcher) settleMany(ctx context.Context, st settleFunc, ss []store.Settlement, actor string) ([]bool, []error) {
	reqs := make([]*settleReq, len(ss))
	b.mu.Lock()
	for i, s := range ss {
		reqs[i] = &settleReq{s: s, actor: actor, done: make(chan struct{})}
		b.pending = append(b.pending, reqs[i])
	}
	if !b.flushing {
		b.flushing = true
		for len(b.pending) > 0 {
			batch := b.take()
			b.mu.Unlock()
			b.flush(ctx, st, batch)
			b.mu.Lock()
		}
		b.flushing = false
	}
	b.mu.Unlock()
	oks, errs := make([]bool, len(ss)), make([]error, len(ss))
	for i, r := range reqs {
		<-r.done
		oks[i], errs[i] = r.ok, r.err
	}
	return oks, errs
}
