package backstop

import (
	"context"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/remote"
	"github.com/backstophq/backstop/store"
)

// releaseRemote is remote.Protocol.Release: the task goes back to pending
// at once, uncharged, as an in-process worker releases its running tasks
// when its grace period runs out on a drain (`backstop work --server` on
// SIGTERM).
func (c *Client) releaseRemote(ctx context.Context, taskID, leaseToken string, p *Progress) (*remote.Result, error) {
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
