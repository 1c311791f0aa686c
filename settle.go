package backstop

import (
	"context"

	"github.com/backstophq/backstop/store"
)

// settle applies settlements to the store: the ONE place where the engine
// settles attempts. Every path goes through it: the in-process worker's
// batches and its release on shutdown (worker.go), the remote protocol's
// batcher (remote.go) and the maintenance services that settle (lease
// expiry, deadlines: through settleVia). Workflow steps are to be advanced
// here, in the settlement's transaction (WORKFLOWS-CONTRACT's glue).
func (c *Client) settle(ctx context.Context, ss []store.Settlement) ([]bool, error) {
	if c.settleSeen != nil {
		c.settleSeen(ss)
	}
	return c.settleSteps(ctx, ss) // workflows.go
}

// settleFunc is Client.settle's shape, for the parts that are handed it.
type settleFunc func(ctx context.Context, ss []store.Settlement) ([]bool, error)

// settleVia is the store as the maintenance services see it, whose Settle
// is Client.settle: they read through the store and settle through the
// engine.
type settleVia struct {
	store.Store
	c *Client
}

func (s settleVia) Settle(ctx context.Context, ss []store.Settlement) ([]bool, error) {
	return s.c.settle(ctx, ss)
}
