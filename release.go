package backstop

import (
	"context"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Release gives a remote attempt back without charging it: the task goes
// back to pending at once with its attempt count unchanged, and the
// execution is recorded as released, exactly as an in-process worker
// releases its running tasks when its grace period runs out on a drain
// (`backstop work --server` on SIGTERM). A stale token is
// ErrLeaseNotCurrent and changes nothing.
func (c *Client) Release(ctx context.Context, taskID, leaseToken string, p *Progress) (*RemoteResult, error) {
	if err := checkLease(taskID, leaseToken); err != nil {
		return nil, err
	}
	if err := validProgress(p); err != nil {
		return nil, err
	}
	exec, err := c.leaseOf(ctx, taskID, leaseToken)
	if err != nil {
		return nil, err
	}
	now := c.now()
	return c.settleRemote(ctx, store.Settlement{TaskID: taskID, ExecutionID: exec, Outcome: bt.OutcomeReleased,
		Error: "released on shutdown (not charged)", FinishedAt: now, State: bt.StatePending, RunAt: now,
		Uncharged: true, Progress: p}, nil)
}
