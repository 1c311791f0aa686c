package backstop

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/filter"
	"github.com/backstophq/backstop/store"
)

// RedriveParams selects dead letters to replay in bulk and says how.
type RedriveParams struct {
	// Filter: Queue, Kind, Reason, Attrs, ErrorContains, Since, Until
	// (States, DLQStatuses, AfterID and Limit are ignored: open dead
	// letters only).
	Filter ListParams
	// Steps selects workflow steps' tasks (stepselect.go): checked against
	// the workflow registry, then added to Filter.Attrs as the attributes
	// workflow, run_id and step_id, so that a halted run's dead step is
	// selected in the database and replaying it resumes the run.
	Steps StepSelection
	// Rate: at most this many replays per second; 0 is unthrottled.
	Rate float64
	// Limit: replay at most this many in this run (0: all). A later run
	// with the same filter continues.
	Limit int
	// Patch, MergePatch, KeepAttempts, Delay, RunAt: as for Replay.
	MergePatch   json.RawMessage
	Patch        []PatchOp
	KeepAttempts bool
	Delay        time.Duration
	RunAt        time.Time
	Actor        string
	// Reason: why the operator redrives (not Filter.Reason, the dead
	// letters' reason), recorded with the actor in each replay's events and
	// on the redrive's record (at most 1 KiB; required when
	// Config.RequireReason).
	Reason string
	// BatchSize: replays per transaction (default 500).
	BatchSize int
	// DryRun changes nothing (no redrive record, no event): the result's
	// Preview says how many open dead letters match now and shows a sample
	// of SampleSize (0: DefaultRedriveSample; negative: none), each with
	// its payload's diff when the redrive patches. Rate and Limit are not
	// used.
	DryRun     bool
	SampleSize int
	// Force takes over a redrive whose runner (another process) was seen
	// recently (ResumeRedrive; redriverunner.go). Without it that is
	// refused: ErrConflict.
	Force bool
	// All: Filter and Steps select nothing, and every open dead letter is
	// meant (checkAll). Without it an empty selection is refused, naming
	// "all"; a dry run needs none (it changes nothing).
	All bool
	// runner: the name this run records on the redrive (ResumeRedrive's).
	runner string
}

// RedriveProgress is reported after every batch and at the end.
type RedriveProgress struct {
	RedriveID string `json:"redrive_id"`
	// Kind: the job's (store.JobRedrive, or a task action's: TaskAction).
	// For a task action Replayed counts the tasks changed and Failed those
	// skipped.
	Kind     string    `json:"kind,omitempty"`
	Resumed  bool      `json:"resumed"`
	Snapshot time.Time `json:"snapshot"`
	Total    int       `json:"total"`    // replayed + failed + still to do, estimated at start
	Replayed int       `json:"replayed"` // over the whole redrive, earlier runs included
	Failed   int       `json:"failed"`
	Rate     float64   `json:"rate"` // replays per second in this run
	Done     bool      `json:"done"`
	// Empty: nothing matched when the redrive started (Done is true too);
	// its record's status is RedriveEmpty, not done.
	Empty bool `json:"empty,omitempty"`
	// DryRun: nothing was changed; Preview holds the count and the sample.
	DryRun  bool            `json:"dry_run,omitempty"`
	Preview *RedrivePreview `json:"preview,omitempty"`
}

// redriveKey is what identifies "the same redrive" for resuming: the
// selection and what is done to it, not the pace.
type redriveKey struct {
	Queue         string            `json:"queue,omitempty"`
	Kind          string            `json:"kind,omitempty"`
	Reason        string            `json:"reason,omitempty"`
	Attrs         map[string]string `json:"attrs,omitempty"`
	ErrorContains string            `json:"error_contains,omitempty"`
	Since         *time.Time        `json:"since,omitempty"`
	Until         *time.Time        `json:"until,omitempty"`
	MergePatch    json.RawMessage   `json:"merge_patch,omitempty"`
	Patch         []PatchOp         `json:"patch,omitempty"`
	KeepAttempts  bool              `json:"keep_attempts,omitempty"`
	Where         string            `json:"where,omitempty"`
}

// rk is the key of p's redrive.
func rk(p RedriveParams) redriveKey {
	f := p.Filter
	return redriveKey{Queue: f.Queue, Kind: f.Kind, Reason: string(f.Reason), Attrs: f.Attrs,
		ErrorContains: f.ErrorContains, Since: timePtr(f.Since), Until: timePtr(f.Until),
		MergePatch: p.MergePatch, Patch: p.Patch, KeepAttempts: p.KeepAttempts, Where: f.Where}
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// Redrive replays every open dead letter matching p.Filter, in id order, at
// most p.Rate per second, reporting progress after each batch. It is
// durable: the redrive is recorded with a snapshot time, and only dead
// letters last seen at or before it are replayed, so a task that dies again
// after being redriven is not redriven twice. If the run stops (ctx ends,
// the process dies), calling Redrive again with the same filter and patch
// resumes the unfinished redrive and replays each dead letter once.
// Without a patch each batch is one set-based update in one transaction.
// A where outside the subset the stores evaluate in SQL is evaluated in Go
// over the other filters' dead letters, streamed page by page (its count
// too), each batch's matches then replayed by id.
func (c *Client) Redrive(ctx context.Context, p RedriveParams, progress func(RedriveProgress)) (RedriveProgress, error) {
	var out RedriveProgress
	if p.Rate < 0 {
		return out, invalid("rate", "must not be negative")
	}
	if p.Limit < 0 {
		return out, invalid("limit", "must not be negative")
	}
	if p.BatchSize <= 0 {
		p.BatchSize = 500
	}
	f := p.Filter
	f.States, f.DLQStatuses, f.AfterID, f.Limit = nil, nil, "", 0
	if f.Reason != "" && !validReason(f.Reason) {
		return out, invalid("reason", "unknown dead-letter reason %q", f.Reason)
	}
	for k := range f.Attrs {
		if !engine.ValidAttrKey(k) {
			return out, invalid("attr", "key %q is not a valid attribute key", k)
		}
	}
	if err := validateDLQFilter(f); err != nil {
		return out, err
	}
	if err := checkWhere(f.Where, false); err != nil {
		return out, err
	}
	if !p.DryRun || p.All { // a dry run changes nothing: it may preview everything without all
		if err := checkAll(p.All, f, p.Steps); err != nil {
			return out, err
		}
	}
	inGo := whereInGo(f.Where)
	if err := checkPatch(p.MergePatch, p.Patch); err != nil {
		return out, err
	}
	if err := engine.CheckText("actor", p.Actor); err != nil {
		return out, err
	}
	if err := c.checkReason("reason", p.Reason); err != nil {
		return out, err
	}
	for _, op := range p.Patch {
		if !json.Valid(op.Value) || op.Path == "" {
			return out, unprocessable("patch %s: invalid", op.Path)
		}
	}
	f, err := c.applySteps(ctx, f, p.Steps) // the registry is read last: bad input is refused first
	if err != nil {
		return out, err
	}
	now := c.now()
	state, runAt, err := c.replaySchedule(p.Delay, p.RunAt, now)
	if err != nil {
		return out, err
	}
	if p.DryRun {
		return c.redriveDryRun(ctx, p, f, inGo, now)
	}
	rk := rk(RedriveParams{Filter: f, MergePatch: p.MergePatch, Patch: p.Patch, KeepAttempts: p.KeepAttempts})
	key, err := json.Marshal(rk)
	if err != nil {
		return out, err
	}
	// The record keeps the operator's reason beside the filter; it is not
	// part of the key, so the same redrive resumes whatever reason a re-run
	// gives (each replay's events record its own run's).
	recorded, err := json.Marshal(struct {
		redriveKey
		OperatorReason string `json:"operator_reason,omitempty"`
	}{rk, p.Reason})
	if err != nil {
		return out, err
	}
	rec, resumed, err := c.store.StartRedrive(ctx, store.Redrive{ID: uuid.Must(uuid.NewV7()).String(), Kind: store.JobRedrive,
		FilterKey: string(key), Filter: recorded, Snapshot: now, StartedAt: now})
	if err != nil {
		return out, fmt.Errorf("redrive: %w", err)
	}
	runner := cmp.Or(p.runner, newRunnerID())
	batch := store.RedriveBatch{RedriveID: rec.ID, Filter: f, Snapshot: rec.Snapshot, Runner: runner,
		State: state, RunAt: runAt, KeepAttempts: p.KeepAttempts, Actor: c.actor(p.Actor), Reason: p.Reason}
	var holder *store.RedriveHolder // the record as the last batch left it, when the store said
	return c.runJob(ctx, jobRun{rec: rec, resumed: resumed, runner: runner, force: p.Force,
		rate: p.Rate, limit: p.Limit, batchSize: p.BatchSize, holder: &holder,
		count: func(ctx context.Context, after string) (int, error) {
			b := batch
			b.AfterID = after
			return c.countRedrive(ctx, b, inGo)
		},
		batch: func(ctx context.Context, after string, n int) (replayed, failed int, last string, err error) {
			batch.AfterID, holder = after, nil
			if len(p.MergePatch) > 0 || len(p.Patch) > 0 {
				return c.redrivePatched(ctx, p, f, batch, n)
			}
			batch.Limit, batch.Now = n, c.now()
			res, err := c.redriveBatch(ctx, batch, inGo)
			if err != nil {
				return 0, 0, "", fmt.Errorf("redrive: %w", err)
			}
			c.telemetry.ReplayedBatch(ctx, res.Replayed, len(res.Conflicts))
			holder = res.Record
			if len(res.Steps) > 0 {
				c.e.ResumeRuns(ctx, res.Steps) // workflows.go: a replayed step resumes its halted run now
			}
			return res.Replayed, len(res.Conflicts), res.LastID, nil
		}}, progress)
}

// redrivePatched replays up to n dead letters one by one (each its own
// transaction, which also advances the redrive record); a where outside
// the SQL subset is evaluated in Go by the listing (filter.Scan).
func (c *Client) redrivePatched(ctx context.Context, p RedriveParams, f ListParams, b store.RedriveBatch, n int) (replayed, failed int, last string, err error) {
	lf := f
	lf.States, lf.DLQStatuses, lf.AfterID, lf.Limit = []State{StateDead}, []DLQStatus{DLQOpen}, b.AfterID, n
	if lf.Until.IsZero() || lf.Until.After(b.Snapshot) {
		lf.Until = b.Snapshot
	}
	page, err := c.store.List(ctx, lf)
	if err != nil {
		return 0, 0, "", fmt.Errorf("redrive: %w", err)
	}
	for _, t := range page {
		if err := ctx.Err(); err != nil {
			return replayed, failed, last, err
		}
		last = t.ID
		res, err := c.replay(ctx, ReplayParams{ID: t.ID, Actor: p.Actor, Reason: p.Reason, MergePatch: p.MergePatch, Patch: p.Patch,
			KeepAttempts: p.KeepAttempts, Delay: p.Delay, RunAt: p.RunAt}, b.RedriveID, b.Snapshot)
		if err != nil || res.Replayed {
			c.telemetry.Replayed(ctx, err)
			c.telemetry.ReplayEvents(ctx, t.ID, replayedTask(res), err)
		}
		switch {
		case err == nil && res.Replayed:
			replayed++ // the record advanced in the replay's transaction
			continue
		case err == nil:
		case errors.Is(err, ErrConflict) || errors.Is(err, ErrUnprocessable):
			failed++
			outcome := store.OutcomeConflict
			if errors.Is(err, ErrUnprocessable) {
				outcome = store.OutcomeUnprocessable
			}
			if aerr := c.store.RecordRedriveItem(ctx, store.RedriveItem{RedriveID: b.RedriveID, TaskID: t.ID,
				Outcome: outcome, Detail: err.Error(), At: c.now()}, 1); aerr != nil {
				return replayed, failed, last, aerr
			}
			continue
		default:
			return replayed, failed, last, err
		}
		// Not replayed, no error: it was no longer an open dead letter.
		if err := c.store.RecordRedriveItem(ctx, store.RedriveItem{RedriveID: b.RedriveID, TaskID: t.ID,
			Outcome: store.OutcomeNotOpen, Detail: "no longer an open dead letter", At: c.now()}, 0); err != nil {
			return replayed, failed, last, err
		}
	}
	return replayed, failed, last, nil
}

// redriveBatch replays the next batch set-based: the store selects it, or,
// for a where outside the SQL subset (x), the next b.Limit matches are
// listed and matched in Go (filter.Scan) and the store replays those ids
// in one transaction. LastID is then the last id listed ("" at the end).
func (c *Client) redriveBatch(ctx context.Context, b store.RedriveBatch, x *filter.Expr) (store.RedriveBatchResult, error) {
	if x == nil {
		return c.store.RedriveBatch(ctx, b)
	}
	lf := redriveList(b.Filter, b.AfterID, b.Snapshot)
	lf.Limit, lf.WithoutPayload = b.Limit, true
	page, err := c.store.List(ctx, lf)
	if err != nil || len(page) == 0 {
		return store.RedriveBatchResult{}, err
	}
	b.IDs = make([]string, len(page))
	for i, t := range page {
		b.IDs[i] = t.ID
	}
	b.Filter.Where = ""
	res, err := c.store.RedriveBatch(ctx, b)
	if err == nil {
		res.LastID = page[len(page)-1].ID
	}
	return res, err
}

// countRedrive counts the open dead letters the redrive would still
// select: in the store, or, for a where outside the SQL subset (x), by
// streaming the other filters' dead letters through Go.
func (c *Client) countRedrive(ctx context.Context, b store.RedriveBatch, x *filter.Expr) (int, error) {
	if x == nil {
		return c.store.CountRedrive(ctx, b)
	}
	lf := redriveList(b.Filter, b.AfterID, b.Snapshot)
	n := 0
	err := filter.Each(ctx, x, lf, c.store.List, func(*Task) error {
		n++
		return nil
	})
	return n, err
}

// redriveList is the listing of the open dead letters a redrive selects,
// after the cursor, last seen at or before the snapshot.
func redriveList(f ListParams, after string, snapshot time.Time) ListParams {
	f.States, f.DLQStatuses, f.AfterID, f.Limit = []State{StateDead}, []DLQStatus{DLQOpen}, after, 0
	if f.Until.IsZero() || f.Until.After(snapshot) {
		f.Until = snapshot
	}
	return f
}

// ErrInterrupted: a redrive stopped before it finished; run it again with
// the same filter to resume.
var ErrInterrupted = errors.New("interrupted")

// overBudget: a batch's where, evaluated in Go, spent its budget; the
// redrive stops there (ErrInvalid naming where, ErrWhereBudget) and
// resumes from its cursor.
func overBudget(p RedriveProgress, err error) error {
	var be *filter.BudgetError
	errors.As(err, &be)
	return &ValidationError{Field: "where", Cause: be, Message: fmt.Sprintf(
		"redrive %s stopped after %d replayed, one batch over its where budget: %v; `backstop redrives resume %s` continues it",
		p.RedriveID, p.Replayed, be, p.RedriveID)}
}

func interrupted(p RedriveProgress, cause error) error {
	return fmt.Errorf("redrive %s %w after %d replayed (%v); run the same redrive again to resume",
		p.RedriveID, ErrInterrupted, p.Replayed, cause)
}

// tokenBucket paces a redrive: tokens accrue at rate per second up to burst;
// a batch of n waits for n tokens. A zero rate never waits.
type tokenBucket struct {
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

func newTokenBucket(rate float64, burst int) *tokenBucket {
	return &tokenBucket{rate: rate, burst: float64(burst), tokens: float64(burst), last: time.Now()}
}

func (b *tokenBucket) wait(ctx context.Context, n int) error {
	if b.rate <= 0 {
		return nil
	}
	now := time.Now()
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	need := float64(n) - b.tokens
	if need > 0 {
		d := time.Duration(need / b.rate * float64(time.Second))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		b.last = time.Now()
		b.tokens = float64(n)
	}
	b.tokens -= float64(n)
	return nil
}
