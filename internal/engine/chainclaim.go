package engine

import (
	"context"
	"slices"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Chain asks a settle batch that enqueues workflow steps to hand them to
// the worker that settles it (SettleChained): a linear workflow's next step
// exists only once its predecessor's settle commits, so claimed the usual
// way it waits for that commit, its queue's wake-up and one more claim.
type Chain struct {
	WorkerID string
	Kinds    []string // empty: any kind
	Lease    time.Duration
	// Free holds, per queue, the slots the worker keeps for the claim
	// (never more than the settled attempts freed); nothing is claimed on
	// a queue not in it.
	Free map[string]int
}

// SettleChained is Settle, and, when the batch advances workflow runs on a
// store that claims in a plan's transaction (store.Features.PlanClaims),
// claims the step tasks the batch enqueues for ch's worker in the same
// transaction: at most ch.Free of each queue, and only where the plain
// claim would take them (not a paused queue: the claim's own rule; not an
// ordered, limited, rate-limited or fair queue: those need their own
// claim, so their steps stay pending for it). The claim is Claim's
// statement restricted to those tasks (lease, attempt, execution id,
// task.claimed event, counts), and its telemetry; bad holds the claimed
// tasks whose payload could not be completed, as Claim's does. Claimed
// tasks are leased to ch's worker once SettleChained returns: it must
// start (or release) them.
func (e *Engine) SettleChained(ctx context.Context, ss []store.Settlement, ch *Chain) (oks []bool, claimed []*Task,
	bad map[*Task]error, err error) {
	if ch == nil || !e.store.Features().PlanClaims || !mayBeSteps(ss) {
		oks, err = e.Settle(ctx, ss)
		return oks, nil, nil, err
	}
	if e.SettleSeen != nil {
		e.SettleSeen(ss)
	}
	var claims []*store.PlanClaim
	if oks, claims, err = e.settleSteps(ctx, ss, ch); err != nil {
		return nil, nil, nil, err
	}
	now := e.Now()
	for _, c := range claims {
		if len(c.Claimed) == 0 {
			continue
		}
		e.Telemetry.claimed(ctx, c.Params.Queue, c.Claimed, nil, now)
		e.Telemetry.claimedEvents(ctx, c.Claimed, ch.WorkerID, now)
		claimed = append(claimed, c.Claimed...)
	}
	if len(claimed) == 0 {
		return oks, nil, nil, nil
	}
	return oks, claimed, e.stepInputs(ctx, claimed), nil
}

// chainClaims are the claims (store.PlanClaim) of the pending tasks among
// tasks that eff's chain may take, taken from its free slots.
func (e *Engine) chainClaims(ctx context.Context, eff *RunEffects, tasks []*Task) []*store.PlanClaim {
	free := eff.chain
	if free == nil {
		return nil
	}
	var (
		out   []*store.PlanClaim
		flags *claimFlags
		now   = e.Now()
	)
	for _, t := range tasks {
		if t.State != bt.StatePending || t.OrderingKey != "" || free.Free[t.Queue] <= 0 ||
			(len(free.Kinds) > 0 && !slices.Contains(free.Kinds, t.Kind)) {
			continue
		}
		i := slices.IndexFunc(out, func(c *store.PlanClaim) bool { return c.Params.Queue == t.Queue })
		if i < 0 {
			if flags == nil {
				flags = e.settings(ctx) // claimsettings.go
			}
			if flags.limited(t.Queue) || flags.fair(t.Queue) || flags.rated(t.Queue) || e.Ordered(t.Queue) {
				free.Free[t.Queue] = 0
				continue
			}
			i = len(out)
			out = append(out, &store.PlanClaim{Params: store.ClaimParams{Queue: t.Queue, Kinds: free.Kinds,
				WorkerID: free.WorkerID, Now: now, Lease: free.Lease}})
		}
		out[i].IDs = append(out[i].IDs, t.ID)
		out[i].Params.Max++
		free.Free[t.Queue]--
	}
	eff.claims = append(eff.claims, out...)
	return out
}
