package backstop

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/backstophq/backstop/store"
)

// RemoteCompletion is one successful remote attempt of a batch.
type RemoteCompletion struct {
	TaskID     string
	LeaseToken string
	Progress   *Progress
	Result     json.RawMessage // the attempt's JSON result (nil: none)
}

// RemoteOutcome is the result of one completion of a batch: the decision,
// or why it was refused (ErrLeaseNotCurrent, ErrNotFound, ErrInvalid).
type RemoteOutcome struct {
	Result *RemoteResult
	Err    error
}

// CompleteMany reports many successful remote attempts at once: they are
// settled together (one store write per up to 500), each only while its
// lease is current, and each gets its own answer, as Complete would give.
func (c *Client) CompleteMany(ctx context.Context, cs []RemoteCompletion) ([]RemoteOutcome, error) {
	out := make([]RemoteOutcome, len(cs))
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
		if errors.Is(err, ErrLeaseNotCurrent) || errors.Is(err, ErrNotFound) {
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
			out[i].Result = &RemoteResult{TaskID: s.TaskID, Outcome: s.Outcome, State: s.State, DeadReason: s.DeadReason}
			out[i].Result.span = c.remoteSettled(ctx, nil, &ss[j])
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
