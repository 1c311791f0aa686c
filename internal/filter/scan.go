package filter

import (
	"context"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// scanPage is how many tasks one read of a Go-side scan takes.
const scanPage = 500

// Scan answers a listing whose where is evaluated in Go: it reads the
// filter's other conditions page by page (list is the store's own List,
// called without the where and with payloads), keeps the tasks x matches,
// and stops at f.Limit matches or the end. The result is what the SQL path
// would give: the first f.Limit matching tasks after f.AfterID, by id. The
// reads and evaluations draw on ctx's budget (WithBudget): a spent one is
// a *BudgetError, and an ended ctx stops the scan mid-evaluation.
func Scan(ctx context.Context, x *Expr, f store.ListFilter, list func(context.Context, store.ListFilter) ([]*bt.Task, error)) ([]*bt.Task, error) {
	m := meterOf(ctx)
	bctx, cancel := m.bound(ctx)
	defer cancel()
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	sub := f
	sub.Where, sub.WithoutPayload, sub.Limit = "", false, max(scanPage, limit)
	var out []*bt.Task
	for {
		if bctx.Err() != nil {
			return nil, m.spentErr(ctx)
		}
		page, err := list(bctx, sub)
		if err != nil {
			if bctx.Err() != nil {
				return nil, m.spentErr(ctx)
			}
			return nil, err
		}
		for _, t := range page {
			ok, err := x.eval(ctx, bctx, m, t.Payload, t.Attributes)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
			if f.WithoutPayload {
				t.Payload = nil
			}
			out = append(out, t)
			if len(out) == limit {
				return out, nil
			}
		}
		if len(page) < sub.Limit {
			return out, nil
		}
		sub.AfterID = page[len(page)-1].ID
	}
}

// Each streams a selection whose where is evaluated in Go: it reads the
// filter's other conditions page by page from f.AfterID (list is the
// store's own List, called without the where and with payloads; f.Limit is
// not used) and calls fn, in id order, with each task x matches. Only a
// page is held at a time. An error from fn stops the walk and is returned.
// Counts and bulk operations outside the SQL subset stream this way, under
// ctx's budget as Scan.
func Each(ctx context.Context, x *Expr, f store.ListFilter, list func(context.Context, store.ListFilter) ([]*bt.Task, error), fn func(*bt.Task) error) error {
	m := meterOf(ctx)
	bctx, cancel := m.bound(ctx)
	defer cancel()
	sub := f
	sub.Where, sub.WithoutPayload, sub.Limit = "", false, scanPage
	for {
		if bctx.Err() != nil {
			return m.spentErr(ctx)
		}
		page, err := list(bctx, sub)
		if err != nil {
			if bctx.Err() != nil {
				return m.spentErr(ctx)
			}
			return err
		}
		for _, t := range page {
			ok, err := x.eval(ctx, bctx, m, t.Payload, t.Attributes)
			if err != nil {
				return err
			}
			if ok {
				if err := fn(t); err != nil {
					return err
				}
			}
		}
		if len(page) < sub.Limit {
			return nil
		}
		sub.AfterID = page[len(page)-1].ID
	}
}
