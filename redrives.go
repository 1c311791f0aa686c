package backstop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/store"
	"github.com/google/uuid"
)

// A redrive is a durable job of its own (redrive.go runs it): its record
// (filter, patch, snapshot, cursor, counts, status) and each item's outcome
// are in the store, so any process can list, show, cancel or resume it.

// Redrive statuses.
const (
	RedriveRunning  = "running"
	RedriveDone     = "done"
	RedriveCanceled = "canceled"
	// RedriveEmpty: nothing matched when the redrive started; nothing was
	// replayed and there is nothing to resume (not "done": a redrive that
	// did nothing never reports that it did).
	RedriveEmpty = "empty"
)

// ErrRedriveCanceled: the redrive was canceled (CancelRedrive) while it ran.
var ErrRedriveCanceled = errors.New("canceled")

// Redrive item outcomes (RedriveItem.Outcome).
const (
	OutcomeReplayed      = store.OutcomeReplayed
	OutcomeConflict      = store.OutcomeConflict      // a uniqueness rule refused the replay
	OutcomeUnprocessable = store.OutcomeUnprocessable // the patch did not apply
	OutcomeNotOpen       = store.OutcomeNotOpen       // no longer an open dead letter when its turn came
)

// RedriveItem is what became of one dead letter a redrive took up.
type RedriveItem = store.RedriveItem

// RedriveRecord is a redrive's durable record with its items counted by
// outcome.
type RedriveRecord struct {
	store.Redrive
	Outcomes map[string]int `json:"outcomes"`
	// RunnerAlive: its runner (Redrive.Runner) was seen less than
	// RedriveStaleAfter ago; Resumable: it is not done and no runner is
	// alive (ResumeRedrive takes it without force).
	RunnerAlive bool `json:"runner_alive"`
	Resumable   bool `json:"resumable"`
}

// Redrives lists redrive records, newest first; before (an id) pages on.
func (c *Client) Redrives(ctx context.Context, before string, limit int) ([]store.Redrive, error) {
	if limit < 0 || limit > 1000 {
		return nil, invalid("limit", "must be between 0 and 1000")
	}
	return c.store.Redrives(ctx, before, limit)
}

// GetRedrive reads a redrive's record and its outcome counts.
func (c *Client) GetRedrive(ctx context.Context, id string) (*RedriveRecord, error) {
	rec, err := c.store.GetRedrive(ctx, id)
	if err != nil {
		return nil, err
	}
	counts, err := c.store.RedriveOutcomes(ctx, id)
	if err != nil {
		return nil, err
	}
	alive, _ := c.RunnerAlive(rec, c.now())
	return &RedriveRecord{Redrive: rec, Outcomes: counts, RunnerAlive: alive, Resumable: rec.Status != RedriveDone && rec.Status != RedriveEmpty && !alive}, nil
}

// RedriveItemsParams selects a redrive's items.
type RedriveItemsParams struct {
	ID string
	// Outcomes: only these (replayed, conflict, unprocessable, not_open;
	// a task job's: canceled, cancel_requested, run_now, deleted,
	// reprioritized, skipped); Failed: only those that failed (conflict,
	// unprocessable, not_open, skipped).
	Outcomes []string
	Failed   bool
	AfterID  string
	Limit    int // default 100, at most 1000
}

var outcomes = []string{OutcomeReplayed, OutcomeConflict, OutcomeUnprocessable, OutcomeNotOpen,
	store.OutcomeCanceled, OutcomeCancelRequested, OutcomeRunNow, OutcomeDeleted, OutcomeReprioritized, OutcomeSkipped}

// RedriveItems lists a redrive's item outcomes in task id order.
func (c *Client) RedriveItems(ctx context.Context, p RedriveItemsParams) ([]RedriveItem, error) {
	if p.Limit < 0 || p.Limit > 1000 {
		return nil, invalid("limit", "must be between 0 and 1000")
	}
	for _, o := range p.Outcomes {
		if !slices.Contains(outcomes, o) {
			return nil, invalid("outcome", "unknown outcome %q (want one of %v)", o, outcomes)
		}
	}
	os := p.Outcomes
	if p.Failed {
		os = []string{OutcomeConflict, OutcomeUnprocessable, OutcomeNotOpen, OutcomeSkipped}
		if len(p.Outcomes) > 0 {
			os = slices.DeleteFunc(slices.Clone(p.Outcomes), func(o string) bool { return o == OutcomeReplayed })
			if len(os) == 0 {
				return []RedriveItem{}, nil
			}
		}
	}
	if _, err := c.store.GetRedrive(ctx, p.ID); err != nil {
		return nil, err
	}
	return c.store.RedriveItems(ctx, store.RedriveItemsQuery{RedriveID: p.ID, Outcomes: os, AfterID: p.AfterID, Limit: p.Limit})
}

// CancelRedrive marks a running redrive canceled: whichever process runs
// it stops after its current batch (what was replayed stays replayed).
// ResumeRedrive continues it. A redrive that is not running is answered as
// it is.
func (c *Client) CancelRedrive(ctx context.Context, id string) (*RedriveRecord, error) {
	if _, err := c.store.SetRedriveStatus(ctx, id, []string{RedriveRunning}, RedriveCanceled, c.now()); err != nil {
		return nil, err
	}
	return c.GetRedrive(ctx, id)
}

// ResumeRedrive continues an unfinished redrive (canceled, or left running
// by a process that stopped) from its cursor with its original filter and
// patch, from any process. p gives the pace and the operator (Rate, Limit,
// BatchSize, Actor, Reason: the record's reason when empty; Force); its
// Filter, patch and scheduling fields are not used. A finished redrive:
// ErrConflict; so is one whose runner (another process) was seen less than
// RedriveStaleAfter ago, unless p.Force.
func (c *Client) ResumeRedrive(ctx context.Context, id string, p RedriveParams, progress func(RedriveProgress)) (RedriveProgress, error) {
	rec, err := c.store.GetRedrive(ctx, id)
	if err != nil {
		return RedriveProgress{}, err
	}
	if rec.Status == RedriveDone || rec.Status == RedriveEmpty {
		return RedriveProgress{}, fmt.Errorf("%w: redrive %s is %s; nothing to resume", ErrConflict, id, rec.Status)
	}
	if rec.Kind != "" && rec.Kind != store.JobRedrive {
		// A task action's job (taskjobs.go): its selection is rebuilt from
		// its record the same way.
		p.runner = newRunnerID()
		if err := c.claimRedrive(ctx, id, p.runner, p.Force); err != nil {
			return RedriveProgress{}, err
		}
		defer func() { _ = c.store.ReleaseRedrive(context.WithoutCancel(ctx), id, p.runner) }()
		if _, err := c.store.SetRedriveStatus(ctx, id, []string{RedriveRunning, RedriveCanceled, "interrupted"}, RedriveRunning, time.Time{}); err != nil {
			return RedriveProgress{}, err
		}
		return c.resumeTaskJob(ctx, rec, p, progress)
	}
	var k struct {
		redriveKey
		OperatorReason string `json:"operator_reason,omitempty"`
	}
	if err := json.Unmarshal([]byte(rec.FilterKey), &k.redriveKey); err != nil {
		return RedriveProgress{}, fmt.Errorf("redrive %s: its filter: %w", id, err)
	}
	_ = json.Unmarshal(rec.Filter, &k)
	f := ListParams{Queue: k.Queue, Kind: k.Kind, Reason: DeadReason(k.Reason), Attrs: k.Attrs, ErrorContains: k.ErrorContains,
		Where: k.Where}
	if k.Since != nil {
		f.Since = *k.Since
	}
	if k.Until != nil {
		f.Until = *k.Until
	}
	rp := RedriveParams{Filter: f, Rate: p.Rate, Limit: p.Limit, BatchSize: p.BatchSize, Actor: p.Actor, Reason: p.Reason,
		MergePatch: k.MergePatch, Patch: k.Patch, KeepAttempts: k.KeepAttempts}
	rp.All = len(dlqSelection(f, StepSelection{})) == 0 // the recorded redrive's own selection, accepted when it started
	if rp.Reason == "" {
		rp.Reason = k.OperatorReason
	}
	if key, err := json.Marshal(rk(rp)); err != nil || string(key) != rec.FilterKey {
		return RedriveProgress{}, fmt.Errorf("redrive %s: its recorded filter %s cannot be rebuilt by this version", id, rec.FilterKey)
	}
	// Refused while another process runs it (its runner was seen
	// recently), unless p.Force: redriverunner.go.
	rp.Force, rp.runner = p.Force, newRunnerID()
	if err := c.claimRedrive(ctx, id, rp.runner, p.Force); err != nil {
		return RedriveProgress{}, err
	}
	defer func() { _ = c.store.ReleaseRedrive(context.WithoutCancel(ctx), id, rp.runner) }()
	if _, err := c.store.SetRedriveStatus(ctx, id, []string{RedriveRunning, RedriveCanceled, "interrupted"}, RedriveRunning, time.Time{}); err != nil {
		return RedriveProgress{}, err
	}
	return c.Redrive(ctx, rp, progress)
}

// A running redrive has a runner: the process running it records its name
// and a heartbeat on the redrive's record every Config.RedriveHeartbeat,
// and clears its name when it stops. ResumeRedrive (and a Redrive that
// would resume the same redrive) refuses one whose runner was seen less
// than RedriveStaleAfter ago, unless forced: two processes never run one
// redrive at once by mistake. A runner that finds another took its
// redrive over (a forced resume) stops after its batch.

// RedriveStaleAfter: a runner not seen for this long is presumed gone
// (three heartbeats).
func (c *Client) RedriveStaleAfter() time.Duration { return 3 * c.cfg.RedriveHeartbeat }

// RunnerAlive reports whether rec's runner was seen within
// RedriveStaleAfter of now, and how long ago a runner was last seen (since
// the redrive started when none ever was).
func (c *Client) RunnerAlive(rec store.Redrive, now time.Time) (alive bool, lastSeen time.Duration) {
	at := rec.StartedAt
	if rec.HeartbeatAt != nil {
		at = *rec.HeartbeatAt
	}
	lastSeen = max(0, now.Sub(at))
	return rec.Runner != "" && rec.HeartbeatAt != nil && lastSeen < c.RedriveStaleAfter(), lastSeen
}

func newRunnerID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), uuid.NewString()[:8])
}

// claimRedrive makes runner the redrive's runner, or says who runs it.
func (c *Client) claimRedrive(ctx context.Context, id, runner string, force bool) error {
	now := c.now()
	rec, ok, err := c.store.ClaimRedrive(ctx, store.RedriveClaim{ID: id, Runner: runner, At: now,
		StaleBefore: now.Add(-c.RedriveStaleAfter()), Force: force})
	if err != nil {
		return fmt.Errorf("redrive %s: %w", id, err)
	}
	if ok {
		return nil
	}
	_, seen := c.RunnerAlive(rec, now)
	return fmt.Errorf("%w: redrive %s is running in another process (runner %s, last seen %s ago; a runner not seen for %s is presumed gone): "+
		"wait for it, cancel it (backstop redrives cancel %s), or once sure its process is gone take it over (backstop redrives resume %s --force)",
		ErrConflict, id, rec.Runner, seen.Round(time.Millisecond), c.RedriveStaleAfter(), id, id)
}

// beatRedrive records runner's heartbeat on the redrive every
// Config.RedriveHeartbeat until the returned stop is called; stop also
// clears the runner's name from the record.
func (c *Client) beatRedrive(ctx context.Context, id, runner string) (stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(c.cfg.RedriveHeartbeat)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			now := c.now()
			_, ok, err := c.store.ClaimRedrive(ctx, store.RedriveClaim{ID: id, Runner: runner, At: now, Renew: true})
			if err == nil && !ok {
				return // taken over: the run sees it after its batch
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
		rctx, done := context.WithTimeout(context.Background(), 5*time.Second)
		defer done()
		_ = c.store.ReleaseRedrive(rctx, id, runner)
	}
}

// The backoff between tries while the store is unavailable.
const (
	storeRetryFirst = 100 * time.Millisecond
	storeRetryMax   = 5 * time.Second
)

// waitOutUnavailable runs op, and runs it again while it fails because
// the store is temporarily unavailable (store.Classify), with a doubling
// backoff, for at most Config.StoreRetry in all. Before each new try it
// calls resync (if not nil), which re-reads what the failed try may or
// may not have committed; resync failing for the same reason counts as a
// failed try. Any other error, and ctx's end, return at once. op must be
// safe to run again: each of its writes is a transaction that either
// committed (resync sees it) or did not.
func (c *Client) waitOutUnavailable(ctx context.Context, what string, op, resync func() error) error {
	err := op()
	if c.cfg.StoreRetry < 0 {
		return err
	}
	deadline := time.Now().Add(c.cfg.StoreRetry)
	wait := storeRetryFirst
	for tries := 1; err != nil && store.IsUnavailable(err) && ctx.Err() == nil; tries++ {
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("%s: the store stayed unavailable for %s (%d tries): %w", what, c.cfg.StoreRetry, tries, store.Classify(err))
		}
		c.cfg.Logger.Warn("store unavailable; trying again", "what", what, "in", wait, "try", tries, "error", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, storeRetryMax)
		if resync != nil {
			if err = resync(); err != nil {
				continue
			}
		}
		err = op()
	}
	return err
}

// A bulk job (a redrive, an action on live tasks) is one record in the
// store (store.Redrive: its kind, selection, snapshot, cursor, counts,
// runner and status) and its items' outcomes. runJob runs any kind: the
// runner's claim and heartbeat, the pace, the count, the batches from the
// cursor, cancellation and takeover from another process, and the finish.
// The job's own work is its count and its batch.

// jobRun is one run of a bulk job.
type jobRun struct {
	rec     store.Redrive
	resumed bool
	runner  string
	force   bool
	rate    float64
	// limit: at most this many in this run (0: all); batchSize per batch.
	limit, batchSize int
	// count says how many are still to do after the cursor.
	count func(ctx context.Context, after string) (int, error)
	// batch does up to n more after the cursor, each committed with the
	// record's advance; last is the new cursor, "" when nothing was left.
	batch func(ctx context.Context, after string, n int) (done, failed int, last string, err error)
	// holder, when not nil, is where batch leaves the record's runner and
	// status as its own transaction left them (nil when the store did not
	// say): the runner then reads the record only when it was not told.
	holder **store.RedriveHolder
}

// noun names the job in messages and commands: "redrive" (`backstop
// redrives resume ID`) for both kinds, which share the record.
const jobNoun = "redrive"

// runJob runs j from its record's cursor, reporting progress after each
// batch (RedriveProgress: Replayed counts the items done, Failed the
// others).
func (c *Client) runJob(ctx context.Context, j jobRun, progress func(RedriveProgress)) (RedriveProgress, error) {
	var out RedriveProgress
	rec := j.rec
	if err := c.claimRedrive(ctx, rec.ID, j.runner, j.force); err != nil {
		return out, err
	}
	defer c.beatRedrive(ctx, rec.ID, j.runner)()
	var left int
	if err := c.waitOutUnavailable(ctx, jobNoun+" "+rec.ID, func() (err error) {
		left, err = j.count(c.batchBudget(ctx), rec.Cursor)
		return err
	}, nil); err != nil {
		return out, engine.WhereErr(fmt.Errorf("%s: %w", jobNoun, err))
	}
	out = RedriveProgress{RedriveID: rec.ID, Kind: rec.Kind, Resumed: j.resumed, Snapshot: rec.Snapshot,
		Total: rec.Replayed + rec.Failed + left, Replayed: rec.Replayed, Failed: rec.Failed}
	report := func() {
		if progress != nil {
			progress(out)
		}
	}
	finish := func(status string) error {
		return c.waitOutUnavailable(ctx, jobNoun+" "+rec.ID, func() error {
			return c.store.FinishRedrive(context.WithoutCancel(ctx), rec.ID, status, c.now())
		}, nil)
	}
	if !j.resumed && left == 0 {
		out.Done, out.Empty = true, true
		if err := finish(RedriveEmpty); err != nil {
			return out, fmt.Errorf("%s: %w", jobNoun, err)
		}
		report()
		return out, nil
	}
	report()
	size := j.batchSize
	if size <= 0 {
		size = 500
	}
	if j.rate > 0 {
		size = min(size, max(1, int(j.rate/10)))
	}
	bucket := newTokenBucket(j.rate, size)
	start := time.Now()
	doneThisRun := 0
	after := rec.Cursor
	for {
		n := size
		if j.limit > 0 {
			n = min(n, j.limit-doneThisRun)
			if n <= 0 {
				return out, nil // the record stays running: the next run continues
			}
		}
		if err := bucket.wait(ctx, n); err != nil {
			return out, interrupted(out, err)
		}
		if err := ctx.Err(); err != nil {
			return out, interrupted(out, err)
		}
		var done, failed int
		var last string
		// A batch the store could not finish (busy, disk full, a lost
		// connection) is tried again from the record: each item is
		// committed with the record's advance, or neither is.
		resync := func() error {
			cur, err := c.store.GetRedrive(ctx, rec.ID)
			if err != nil {
				return err
			}
			after, out.Replayed, out.Failed = cur.Cursor, cur.Replayed, cur.Failed
			return nil
		}
		err := c.waitOutUnavailable(ctx, jobNoun+" "+rec.ID, func() (err error) {
			done, failed, last, err = j.batch(c.batchBudget(ctx), after, n)
			return err
		}, resync)
		if err != nil {
			out.Replayed += done
			out.Failed += failed
			if ctx.Err() != nil {
				return out, interrupted(out, ctx.Err())
			}
			if errors.Is(err, ErrWhereBudget) {
				return out, overBudget(out, err)
			}
			return out, err
		}
		// Canceled from any process (CancelRedrive), or taken over: stop
		// after this batch (a store that reports the record replayed
		// nothing in a batch that started after either).
		cur := store.RedriveHolder{Runner: j.runner, Status: RedriveRunning} // unread: go on
		if j.holder != nil && *j.holder != nil {
			cur = **j.holder
		} else if last != "" {
			if r, err := c.store.GetRedrive(ctx, rec.ID); err == nil {
				cur = store.RedriveHolder{Runner: r.Runner, Status: r.Status}
			}
		}
		out.Replayed += done
		out.Failed += failed
		var stop error
		switch {
		case cur.Runner != j.runner:
			stop = fmt.Errorf("%s %s %w after %d done: runner %q took it over", jobNoun, rec.ID, ErrInterrupted, out.Replayed, cur.Runner)
		case cur.Status == RedriveCanceled:
			stop = fmt.Errorf("%s %s %w: %w after %d done; `backstop redrives resume %s` continues it",
				jobNoun, rec.ID, ErrInterrupted, ErrRedriveCanceled, out.Replayed, rec.ID)
		case cur.Status != RedriveRunning: // finished by another process
			stop = fmt.Errorf("%s %s %w after %d done: its record is %s", jobNoun, rec.ID, ErrInterrupted, out.Replayed, cur.Status)
		}
		if stop != nil {
			report()
			return out, stop
		}
		if last == "" { // nothing was left
			out.Done = true
			if err := finish(RedriveDone); err != nil {
				return out, fmt.Errorf("%s: %w", jobNoun, err)
			}
			report()
			return out, nil
		}
		after = last
		doneThisRun += done + failed
		if el := time.Since(start).Seconds(); el > 0 {
			out.Rate = float64(doneThisRun) / el
		}
		report()
	}
}
