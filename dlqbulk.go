package backstop

import (
	"context"
	"errors"
	"strings"
	"time"
)

// CloseMatchingParams discards or resolves, in one call, up to Limit open
// dead letters matching Filter that died at or before Snapshot. A caller
// closing "all N matching" calls again while More: each call takes the next
// ones (the closed ones no longer match), so stopping is cancelling and
// calling again is resuming.
type CloseMatchingParams struct {
	Filter ListParams
	// Status: DLQDiscarded (Reason required) or DLQResolved (Reason or
	// Note).
	Status              DLQStatus
	Reason, Note, Actor string
	// Snapshot: only dead letters that died at or before it (default now),
	// so letters dying meanwhile are not swept up by a long bulk action.
	Snapshot time.Time
	// Limit: at most this many in this call (default 500, at most 5,000).
	Limit int
	// All: Filter selects nothing, and every open dead letter is meant
	// (checkAll). Without it an empty Filter is refused, naming "all".
	All bool
}

// CloseMatchingResult is what one call did.
type CloseMatchingResult struct {
	Closed int `json:"closed"`
	// Skipped: matched, but another operator changed it first.
	Skipped int `json:"skipped"`
	// More: more may match; call again.
	More     bool      `json:"more"`
	Snapshot time.Time `json:"snapshot"`
}

const maxCloseMatching = 5000

// CloseMatching discards or resolves the open dead letters matching a
// filter, a batch per call, each with its own history event (actor and
// reason) like Discard and Resolve one by one. A store that is
// temporarily unavailable is waited out (Config.StoreRetry).
func (c *Client) CloseMatching(ctx context.Context, p CloseMatchingParams) (CloseMatchingResult, error) {
	out := CloseMatchingResult{Snapshot: p.Snapshot}
	if p.Status != DLQDiscarded && p.Status != DLQResolved {
		return out, invalid("status", "must be discarded or resolved, not %q", p.Status)
	}
	if p.Limit < 0 || p.Limit > maxCloseMatching {
		return out, invalid("limit", "must be between 1 and %d", maxCloseMatching)
	}
	if p.Limit == 0 {
		p.Limit = 500
	}
	if err := checkAll(p.All, p.Filter, StepSelection{}); err != nil {
		return out, err
	}
	if out.Snapshot.IsZero() {
		out.Snapshot = c.now()
	}
	f := p.Filter
	f.States, f.DLQStatuses, f.AfterID, f.Limit, f.WithoutPayload = []State{StateDead}, []DLQStatus{DLQOpen}, "", p.Limit, true
	if f.Until.IsZero() || f.Until.After(out.Snapshot) {
		f.Until = out.Snapshot
	}
	// The one-by-one rules, checked once up front: a bad reason or note
	// refuses the call with nothing closed.
	check := c.checkDiscard(p.Reason)
	if p.Status == DLQResolved {
		check = c.checkResolve(p.Reason, p.Note)
	}
	if check != nil {
		return out, check
	}
	// A store that is unavailable for a moment (busy, a lost connection)
	// is waited out (Config.StoreRetry): each close is one transaction, and
	// one that did commit before its answer was lost is then skipped.
	var page []*Task
	err := c.waitOutUnavailable(ctx, "close dead letters", func() (err error) {
		page, err = c.List(ctx, f)
		return err
	}, nil)
	if err != nil {
		return out, err
	}
	for _, t := range page {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		err := c.waitOutUnavailable(ctx, "close dead letter "+t.ID, func() (err error) {
			if p.Status == DLQDiscarded {
				_, err = c.Discard(ctx, DiscardParams{ID: t.ID, Reason: p.Reason, Actor: p.Actor})
			} else {
				_, err = c.Resolve(ctx, ResolveParams{ID: t.ID, Reason: p.Reason, Note: p.Note, Actor: p.Actor})
			}
			return err
		}, nil)
		switch {
		case err == nil:
			out.Closed++
		case errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict):
			out.Skipped++
		default:
			return out, err
		}
	}
	out.More = len(page) == p.Limit
	return out, nil
}

// dlqSelection names the filters of f and s that narrow a bulk action on
// open dead letters (by their API names); none means every one.
func dlqSelection(f ListParams, s StepSelection) []string {
	var sel selection
	add := sel.add
	add(f.Queue != "", "queue")
	add(f.Kind != "", "kind")
	add(f.Reason != "", "reason")
	add(f.ErrorContains != "", "error_contains")
	add(len(f.Attrs) > 0, "attributes")
	add(!f.Since.IsZero(), "since")
	add(!f.Until.IsZero(), "until")
	add(f.Where != "", "where")
	add(s.Workflow != "", "workflow")
	add(s.RunID != "", "run_id")
	add(s.Step != "", "step")
	return sel
}

// selection names the filters a bulk action's selection sets.
type selection []string

func (s *selection) add(set bool, name string) {
	if set {
		*s = append(*s, name)
	}
}

// checkAll is the rule of every bulk action on open dead letters (redrive,
// close): one that selects nothing acts on all of them, so it must say so
// with all; all beside a selection is a contradiction. Both are refused
// naming "all", and nothing is changed.
func checkAll(all bool, f ListParams, s StepSelection) error {
	sel := dlqSelection(f, s)
	switch {
	case all && len(sel) > 0:
		return invalid("all", "\"all\": true selects every open dead letter; it cannot be narrowed by %s (drop one or the other)",
			strings.Join(sel, ", "))
	case !all && len(sel) == 0:
		return invalid("all", "nothing is selected: send \"all\": true (the CLI's --all) to act on every open dead letter, "+
			"or select some with queue, kind, reason, error_contains, attributes, since, until, where, workflow, run_id or step")
	}
	return nil
}
