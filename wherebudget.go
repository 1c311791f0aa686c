package backstop

import (
	"context"

	"github.com/backstophq/backstop/internal/filter"
)

// A where outside the SQL subset is evaluated in Go under a budget of cost
// and time (Config.WhereCost, Config.WhereTime) tied to the caller's
// context: one per call (a listing, an export, a count, a dry run), one
// per batch of a bulk job (redrive, purge; a close is a batch per call).
// A spent budget stops the evaluation with ErrWhereBudget; a caller that
// goes away stops it too.

// WithWhereBudget returns ctx carrying a fresh where budget (the
// configured one, its time running from now): every call made with it
// shares it, as the calls of one API request do. A call made without one
// gets its own.
func (c *Client) WithWhereBudget(ctx context.Context) context.Context {
	return filter.WithBudget(ctx, c.whereBudget())
}

// whereBudget is the configured budget.
func (c *Client) whereBudget() filter.Budget {
	return filter.Budget{Cost: c.cfg.WhereCost, Time: c.cfg.WhereTime}
}

// callBudget is ctx with a fresh where budget, unless it carries one
// already (a call made within another call shares its budget).
func (c *Client) callBudget(ctx context.Context) context.Context {
	if filter.HasBudget(ctx) {
		return ctx
	}
	return filter.WithBudget(ctx, c.whereBudget())
}

// batchBudget is ctx with a fresh where budget for one batch of a job.
func (c *Client) batchBudget(ctx context.Context) context.Context {
	return c.WithWhereBudget(ctx)
}
