package backstop

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/store"
	"github.com/google/uuid"
)

// The dead-letter operations. Each exists once, here; the CLI (and later
// the HTTP API) call these functions. Every one names its Actor, recorded in
// the task's history (events) in the same transaction as the change.

type (
	DLQStatus = bt.DLQStatus
	Event     = bt.Event
)

const (
	DLQOpen      = bt.DLQOpen
	DLQReplayed  = bt.DLQReplayed
	DLQDiscarded = bt.DLQDiscarded
	DLQResolved  = bt.DLQResolved
)

// DLQStatuses lists every dead-letter status.
var DLQStatuses = []DLQStatus{DLQOpen, DLQReplayed, DLQDiscarded, DLQResolved}

func validDLQStatus(s DLQStatus) bool {
	return slices.Contains(DLQStatuses, s)
}

// ReplayParams says how to replay one dead letter.
type ReplayParams struct {
	ID    string
	Actor string
	// Patch: an RFC 7396 merge patch (MergePatch) and path patches (Patch,
	// in order) applied to the payload; refused as a whole if one fails.
	MergePatch json.RawMessage
	Patch      []PatchOp
	// KeepAttempts keeps the attempt counter instead of resetting it to 0.
	KeepAttempts bool
	// Delay or RunAt (at most one) schedules the replay; default: now.
	Delay time.Duration
	RunAt time.Time
	// NewID copies the dead letter under a fresh id (replayed_from = ID)
	// and marks the original replayed, instead of replaying it in place.
	NewID bool
	// Reopen also replays a dead letter that was discarded or resolved
	// (undoing a discard or a resolve made by mistake). The history's
	// dlq.replay_requested and dlq.replayed events record the actor and
	// the status the record came from (from_status). The HTTP API allows
	// it to admin tokens only, like every replay.
	Reopen bool
	// Reason: why the operator replays, recorded with the actor in the
	// dlq.replay_requested and dlq.replayed events (at most 1 KiB of
	// UTF-8; required when Config.RequireReason).
	Reason string
}

// ReplayResult reports a replay. Replayed is false when the id is no longer
// an open dead letter (already replayed, live again, or discarded or
// resolved without Reopen): nothing changed.
type ReplayResult struct {
	Replayed bool   `json:"replayed"`
	ID       string `json:"id"`
	NewID    string `json:"new_id,omitempty"`
	// State of the task when it was not replayed.
	State     State     `json:"state,omitempty"`
	DLQStatus DLQStatus `json:"dlq_status,omitempty"`
	// Task is the task that will run (the copy with NewID).
	Task *Task `json:"task,omitempty"`
}

func (c *Client) actor(a string) string {
	if a == "" {
		return "library"
	}
	return a
}

func (c *Client) newEvent(at time.Time, typ string, t *Task, actor string, body any) Event {
	b, _ := json.Marshal(body)
	e := store.NewEvent(at, typ, t.ID, t.Queue, t.Kind, actor, b)
	e.Attributes = t.Attributes
	return e
}

func (p *ReplayParams) patched() bool { return len(p.MergePatch) > 0 || len(p.Patch) > 0 }

func (c *Client) replaySchedule(delay time.Duration, runAt time.Time, now time.Time) (State, time.Time, error) {
	if delay < 0 {
		return "", time.Time{}, invalid("delay", "must not be negative")
	}
	if delay > 0 && !runAt.IsZero() {
		return "", time.Time{}, invalid("run_at", "give a delay or a run-at time, not both")
	}
	if !runAt.IsZero() {
		if err := CheckTime("run_at", runAt); err != nil {
			return "", time.Time{}, err
		}
	}
	at := now.Add(delay)
	if !runAt.IsZero() {
		at = runAt.UTC().Truncate(time.Microsecond)
	}
	if at.After(now) {
		return StateScheduled, at, nil
	}
	return StatePending, now, nil
}

// Replay moves a dead letter back to its queue under its own id (or, with
// NewID, a copy under a new one), in one transaction that locks the row: two
// concurrent replays move it exactly once. Unknown id: ErrNotFound. A patch
// that does not apply: ErrUnprocessable (and ErrInvalid). A uniqueness rule
// the replayed task would break (a live task holds its idempotency key, a
// waiting task of its kind holds its merge key, the new id exists):
// ErrConflict. Refusals change nothing but record dlq.replay_failed.
func (c *Client) Replay(ctx context.Context, p ReplayParams) (*ReplayResult, error) {
	r, err := c.replay(ctx, p, "", time.Time{})
	if err != nil || r.Replayed {
		c.telemetry.Replayed(ctx, err)
		c.telemetry.ReplayEvents(ctx, p.ID, replayedTask(r), err)
	}
	return r, err
}

// replayedTask is the task a replay made to run (nil: none).
func replayedTask(r *ReplayResult) *Task {
	if r == nil {
		return nil
	}
	return r.Task
}

func (c *Client) replay(ctx context.Context, p ReplayParams, redriveID string, snapshot time.Time) (*ReplayResult, error) {
	if err := ValidID(p.ID); err != nil {
		return nil, invalid("id", "%v", err)
	}
	if err := checkPatch(p.MergePatch, p.Patch); err != nil {
		return nil, err
	}
	if err := engine.CheckText("actor", p.Actor); err != nil {
		return nil, err
	}
	if err := c.checkReason("reason", p.Reason); err != nil {
		return nil, err
	}
	now := c.now()
	state, runAt, err := c.replaySchedule(p.Delay, p.RunAt, now)
	if err != nil {
		return nil, err
	}
	actor := c.actor(p.Actor)
	newID := ""
	if p.NewID {
		newID = uuid.Must(uuid.NewV7()).String()
	}
	res := &ReplayResult{ID: p.ID, NewID: newID}
	// A fan-out item's run input, read before the transaction: a patch
	// applies to the payload with it, and a copy (NewID) is no step of the
	// run, so it stores its payload whole.
	var inputs map[string]json.RawMessage
	if (p.patched() || p.NewID) && strings.IndexByte(p.ID, '.') >= 0 {
		if inputs, err = c.store.RunInputsOfTasks(ctx, []string{p.ID}); err != nil {
			return nil, err
		}
	}
	var seen *Task
	t, err := c.store.Replay(ctx, p.ID, func(t *Task) (*store.ReplayPlan, error) {
		seen = t
		if t.State != StateDead || !replayable(t.DLQStatus, p.Reopen && redriveID == "") ||
			(redriveID != "" && t.LastSeen != nil && t.LastSeen.After(snapshot)) {
			return nil, nil
		}
		plan := &store.ReplayPlan{NewID: newID, State: state, RunAt: runAt, KeepAttempts: p.KeepAttempts,
			Now: now, InlineLimit: c.cfg.InlinePayloadLimit, RedriveID: redriveID}
		if p.NewID && !p.patched() && engine.InputRef(t) != "" {
			whole, err := patchInput(t, inputs)
			if err != nil {
				return nil, err
			}
			plan.Payload = whole
		}
		if p.patched() {
			base, err := patchInput(t, inputs)
			if err != nil {
				return nil, err
			}
			payload, err := applyPatch(base, p.MergePatch, p.Patch)
			if err != nil {
				return nil, err
			}
			if len(payload) > c.cfg.MaxPayloadSize {
				return nil, unprocessable("patch: the patched payload is %d bytes; the maximum is %d", len(payload), c.cfg.MaxPayloadSize)
			}
			plan.Payload = payload
		}
		body := map[string]any{"patched": p.patched(), "keep_attempts": p.KeepAttempts, "new_id": newID,
			"replay_count": t.ReplayCount + 1, "run_at": runAt, "from_status": t.DLQStatus}
		if redriveID != "" {
			body["redrive_id"] = redriveID
		}
		req := map[string]any{"patched": p.patched(), "keep_attempts": p.KeepAttempts, "new_id": newID, "run_at": runAt,
			"from_status": t.DLQStatus}
		if t.DLQStatus != DLQOpen {
			req["reopen"] = true
		}
		if len(p.MergePatch) > 0 {
			req["merge_patch"] = p.MergePatch
		}
		if len(p.Patch) > 0 {
			req["patch"] = p.Patch
		}
		plan.Events = []Event{c.newEvent(now, "dlq.replay_requested", t, actor, withReason(req, p.Reason)),
			c.newEvent(now, "dlq.replayed", t, actor, withReason(body, p.Reason))}
		return plan, nil
	})
	if err != nil {
		if seen != nil {
			ev := c.newEvent(now, "dlq.replay_failed", seen, actor, withReason(map[string]any{"error": err.Error(), "redrive_id": redriveID}, p.Reason))
			if aerr := c.store.AppendEvents(context.WithoutCancel(ctx), []Event{ev}); aerr != nil {
				c.cfg.Logger.Warn("recording a refused replay", "task_id", p.ID, "error", aerr)
			}
		}
		return nil, err
	}
	if t == nil {
		res.NewID = ""
		if seen != nil {
			res.State, res.DLQStatus = seen.State, seen.DLQStatus
		}
		return res, nil
	}
	res.Replayed, res.Task = true, t
	if newID == "" {
		c.e.ResumeRuns(ctx, []string{p.ID}) // workflows.go: a replayed step resumes its run
	}
	return res, nil
}

// replayable: a dead letter of this status may be replayed (reopen: also
// a discarded or resolved one; a replayed one never is, its copy lives).
func replayable(st DLQStatus, reopen bool) bool {
	return st == DLQOpen || (reopen && (st == DLQDiscarded || st == DLQResolved))
}

// DiscardParams drops a dead letter on purpose; Reason is required.
type DiscardParams struct {
	ID, Reason, Actor string
}

// Discard marks an open dead letter discarded, keeping the record (status,
// reason, actor, time). Not an open dead letter: ErrNotFound.
func (c *Client) Discard(ctx context.Context, p DiscardParams) (*Task, error) {
	if err := c.checkDiscard(p.Reason); err != nil {
		return nil, err
	}
	t, err := c.setDLQStatus(ctx, p.ID, DLQDiscarded, p.Actor, "dlq.discarded", map[string]any{"reason": p.Reason})
	if err == nil {
		c.telemetry.Discarded(ctx, t)
	}
	return t, err
}

// ResolveParams marks a dead letter handled by hand. Reason is why (the
// same as every operator action's); Note, the older name, says how it was
// handled. Either satisfies Config.RequireReason; a Note without a Reason
// is also recorded as the reason.
type ResolveParams struct {
	ID, Note, Actor string
	Reason          string
}

// Resolve marks an open dead letter resolved (handled by hand), keeping the
// record. Not an open dead letter: ErrNotFound.
func (c *Client) Resolve(ctx context.Context, p ResolveParams) (*Task, error) {
	if err := c.checkResolve(p.Reason, p.Note); err != nil {
		return nil, err
	}
	reason := cmp.Or(p.Reason, p.Note)
	return c.setDLQStatus(ctx, p.ID, DLQResolved, p.Actor, "dlq.resolved", withReason(map[string]any{"note": p.Note}, reason))
}

// checkDiscard: a discard needs a reason (UTF-8, at most MaxReasonBytes).
func (c *Client) checkDiscard(reason string) error {
	if strings.TrimSpace(reason) == "" {
		return invalid("reason", "is required to discard a dead letter")
	}
	return c.checkReason("reason", reason)
}

// checkResolve: a note alone satisfies RequireReason (and is recorded as
// the reason).
func (c *Client) checkResolve(reason, note string) error {
	if err := engine.CheckText("note", note); err != nil {
		return err
	}
	return CheckReason("reason", reason, c.cfg.RequireReason && strings.TrimSpace(note) == "")
}

func (c *Client) setDLQStatus(ctx context.Context, id string, st DLQStatus, actor, typ string, body any) (*Task, error) {
	if err := ValidID(id); err != nil {
		return nil, invalid("id", "%v", err)
	}
	if err := engine.CheckText("actor", actor); err != nil {
		return nil, err
	}
	now := c.now()
	b, _ := json.Marshal(body)
	return c.store.SetDLQStatus(ctx, store.DLQStatusChange{ID: id, Status: st, Now: now,
		Event: store.NewEvent(now, typ, id, "", "", c.actor(actor), b)})
}

// PurgeParams selects dead letters to delete for good.
type PurgeParams struct {
	// OlderThan: only records whose status last changed this long ago.
	OlderThan time.Duration
	// Statuses: default discarded and resolved. Naming DLQOpen also
	// deletes open dead letters (tasks waiting for an operator): refused
	// unless ConfirmOpen (a dry run needs no confirmation).
	Statuses []DLQStatus
	// ConfirmOpen confirms that open dead letters may be deleted.
	ConfirmOpen bool
	// DryRun counts the dead letters that would be deleted and deletes
	// nothing.
	DryRun bool
	// Reason: why (required when Config.RequireReason). The purged
	// records' own history goes with them, so each transaction of a purge
	// that deleted any (at most 1,000 records each) records a dlq.purged
	// event in the event log in that transaction (subject "", body: purged,
	// statuses, older_than, reason) with Actor.
	Reason string
	Actor  string
	// Where: only dead letters this CEL condition on the payload and
	// attributes matches (ListParams.Where); an invalid one is refused
	// (ErrInvalid naming where) and nothing is deleted.
	Where string
	// BelowFloor lets OlderThan be below Config.PurgeFloor (refused
	// otherwise, naming purge_floor); the purge's event records it.
	BelowFloor bool
}

// PurgeDLQ deletes dead letters (task row, executions, spilled payload,
// events) and returns how many; with DryRun, how many it would delete.
func (c *Client) PurgeDLQ(ctx context.Context, p PurgeParams) (int, error) {
	if p.OlderThan < 0 {
		return 0, invalid("older_than", "must not be negative")
	}
	if len(p.Statuses) == 0 {
		p.Statuses = []DLQStatus{DLQDiscarded, DLQResolved}
	}
	for _, s := range p.Statuses {
		if !validDLQStatus(s) {
			return 0, invalid("status", "unknown dead-letter status %q", s)
		}
	}
	if slices.Contains(p.Statuses, DLQOpen) && !p.ConfirmOpen && !p.DryRun {
		return 0, invalid("confirm_open", "purging open dead letters deletes tasks that wait for an operator: "+
			"confirm it (confirm_open: true in the API, --yes or the terminal's question on the CLI)")
	}
	if err := engine.CheckText("actor", p.Actor); err != nil {
		return 0, err
	}
	if err := c.checkReason("reason", p.Reason); err != nil {
		return 0, err
	}
	if err := checkWhere(p.Where, false); err != nil {
		return 0, err
	}
	floor := c.cfg.PurgeFloor
	if p.OlderThan < floor && !p.BelowFloor {
		return 0, invalid("older_than", "%s is below dlq.purge_floor %s: the purge would delete dead letters younger than the floor; "+
			"an admin who means it says so (below_floor: true in the API, --below-floor on the CLI)", shortDuration(p.OlderThan), shortDuration(floor))
	}
	now := c.now()
	actor := c.actor(p.Actor)
	// The record of each deleting batch, written in its transaction.
	event := func(purged int) Event {
		body := map[string]any{"purged": purged, "statuses": p.Statuses, "older_than": Duration(p.OlderThan)}
		if p.Where != "" {
			body["where"] = p.Where
		}
		if p.BelowFloor && p.OlderThan < floor {
			body["below_floor"], body["purge_floor"] = true, Duration(floor)
		}
		b, _ := json.Marshal(withReason(body, p.Reason))
		return store.NewEvent(now, "dlq.purged", "", "", "", actor, b)
	}
	sp := store.PurgeParams{Before: now.Add(-p.OlderThan), Statuses: p.Statuses, DryRun: p.DryRun, Event: event}
	if p.Where == "" {
		return c.store.PurgeDLQ(ctx, sp)
	}
	return c.purgeWhere(ctx, sp, p.Where)
}

// shortDuration prints d without its zero minutes and seconds: 1h, 168h,
// 1h30m, 0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// purgeWhere purges the dead letters sp selects that where matches: the
// listing (which evaluates where in SQL where the store can, in Go
// otherwise) names a page of them, and the store deletes those of the page
// that still meet sp's status and age, in one transaction per page.
func (c *Client) purgeWhere(ctx context.Context, sp store.PurgeParams, where string) (int, error) {
	const page = 1000
	f := ListParams{States: []State{StateDead}, DLQStatuses: sp.Statuses, Where: where, WithoutPayload: true, Limit: page}
	total := 0
	for {
		ts, err := c.store.List(c.batchBudget(ctx), f)
		if err != nil {
			return total, engine.WhereErr(err)
		}
		if len(ts) > 0 {
			ids := make([]string, len(ts))
			for i, t := range ts {
				ids[i] = t.ID
			}
			q := sp
			q.IDs, q.Limit = ids, len(ids)
			n, err := c.store.PurgeDLQ(ctx, q)
			total += n
			if err != nil {
				return total, err
			}
		}
		if len(ts) < page {
			return total, nil
		}
		f.AfterID = ts[len(ts)-1].ID
	}
}

// Events returns a task's history, oldest first.
func (c *Client) Events(ctx context.Context, taskID string) ([]Event, error) {
	return c.store.Events(ctx, taskID)
}

// DeadLetterExport is one dead letter with its history, as export writes it.
type DeadLetterExport struct {
	*Task
	Executions []Execution `json:"executions"`
	Events     []Event     `json:"events"`
}

// exportPayloadRead bounds the payload bytes ExportDLQ loads with one read
// (at least one dead letter).
const exportPayloadRead = 1 << 20

// ExportDLQ streams the dead letters matching f (States are ignored) in
// pages, with their executions and events, to fn, in id order. It returns
// how many it exported. Each page is read as summaries first, then its
// payloads in slices of about exportPayloadRead bytes, so memory follows
// that, not the page size times the largest payload.
func (c *Client) ExportDLQ(ctx context.Context, f ListParams, fn func(DeadLetterExport) error) (int, error) {
	ctx = c.callBudget(ctx) // one budget for the whole export
	limit := f.Limit
	const pageSize = 500
	n := 0
	for {
		sf := f
		sf.Limit, sf.WithoutPayload = pageSize, true
		page, err := c.DeadLetters(ctx, sf)
		if err != nil {
			return n, err
		}
		end := len(page) < pageSize
		for i := 0; i < len(page); {
			j, read := i+1, page[i].PayloadSize
			for j < len(page) && read+page[j].PayloadSize <= exportPayloadRead {
				read += page[j].PayloadSize
				j++
			}
			ff := f
			ff.Limit, ff.WithoutPayload = j-i, false
			tasks, err := c.DeadLetters(ctx, ff)
			if err != nil {
				return n, err
			}
			for _, t := range tasks {
				if limit > 0 && n >= limit {
					return n, nil
				}
				if err := c.exportOne(ctx, t, fn); err != nil {
					return n, err
				}
				n++
				f.AfterID = t.ID
			}
			if len(tasks) < j-i { // some went meanwhile: read on from the last one
				end = false
				break
			}
			i = j
		}
		if end || len(page) == 0 {
			return n, nil
		}
	}
}

// exportOne hands one dead letter, with its executions and events, to fn.
func (c *Client) exportOne(ctx context.Context, t *Task, fn func(DeadLetterExport) error) error {
	ex, err := c.store.Executions(ctx, t.ID)
	if err != nil {
		return err
	}
	if ex == nil {
		ex = []Execution{}
	}
	evs, err := c.store.Events(ctx, t.ID)
	if err != nil {
		return err
	}
	if t.Attributes == nil {
		t.Attributes = map[string]string{}
	}
	return fn(DeadLetterExport{Task: t, Executions: ex, Events: evs})
}

// validateDLQFilter checks the dead-letter fields of a listing filter.
func validateDLQFilter(f ListParams) error {
	if err := engine.CheckText("error_contains", f.ErrorContains); err != nil {
		return err
	}
	for k, v := range f.Attrs {
		if engine.CheckText("attr", v) != nil {
			return invalid("attr", "value of %q is not valid UTF-8 text (or holds a NUL)", k)
		}
	}
	for _, s := range f.DLQStatuses {
		if !validDLQStatus(s) {
			return invalid("status", "unknown dead-letter status %q (open, replayed, discarded, resolved)", s)
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		return invalid("until", "is before --since")
	}
	if err := engine.CheckText("idempotency_key", f.IdempotencyKey); err != nil {
		return err
	}
	if !f.CreatedSince.IsZero() && !f.CreatedUntil.IsZero() && f.CreatedUntil.Before(f.CreatedSince) {
		return invalid("created_until", "is before created_since")
	}
	return nil
}

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
