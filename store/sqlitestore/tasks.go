package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/filter"
	"github.com/backstophq/backstop/store"
)

// querier is what both *sql.DB and *sql.Tx offer.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

const taskCols = `id, queue, kind, state, priority, attempt, max_attempts, payload, payload_size,
payload_spilled, attributes, run_at, created_at, updated_at, timeout_us, deadline, retry_policy,
idempotency_key, merge_key, merge_count, progress_total, progress_completed, complexity,
trace_parent, last_error, worker_id, execution_id, attempted_at, lease_expires_at,
cancel_requested_at, finalized_at, dead_reason, first_seen, last_seen, dead_count, replay_count,
dlq_status, replayed_from, unique_until`

// summaryCols is taskCols with a NULL payload (ListFilter's
// WithoutPayload): the row's payload is not read, payload_size says how long
// it is, and spilled payloads are not loaded.
var summaryCols = strings.Replace(taskCols, "payload, payload_size", "NULL, payload_size", 1)

type scanner interface{ Scan(dest ...any) error }

func scanTask(sc scanner) (*bt.Task, error) {
	var (
		t                                                             bt.Task
		payload                                                       []byte
		spilled                                                       bool
		attrs, retry, idem, merge, trace, lastErr, worker, exec, dead sql.NullString
		dlq, replFrom                                                 sql.NullString
		runAt, created, updated, timeoutUS                            int64
		deadline, attempted, lease, cancelReq, final, first, last     sql.NullInt64
		uniqueUntil                                                   sql.NullInt64
		state                                                         string
	)
	err := sc.Scan(&t.ID, &t.Queue, &t.Kind, &state, &t.Priority, &t.Attempt, &t.MaxAttempts,
		&payload, &t.PayloadSize, &spilled, &attrs, &runAt, &created, &updated, &timeoutUS,
		&deadline, &retry, &idem, &merge, &t.MergeCount, &t.Progress.Total, &t.Progress.Completed,
		&t.Complexity, &trace, &lastErr, &worker, &exec, &attempted, &lease, &cancelReq, &final,
		&dead, &first, &last, &t.DeadCount, &t.ReplayCount, &dlq, &replFrom, &uniqueUntil)
	if err != nil {
		return nil, err
	}
	t.State = bt.State(state)
	if payload != nil {
		t.Payload = json.RawMessage(payload)
	}
	t.PayloadSpilled = spilled
	if attrs.Valid && attrs.String != "" {
		if err := json.Unmarshal([]byte(attrs.String), &t.Attributes); err != nil {
			return nil, fmt.Errorf("task %s: attributes: %w", t.ID, err)
		}
	}
	if retry.Valid && retry.String != "" {
		t.Retry = new(bt.RetryPolicy)
		if err := json.Unmarshal([]byte(retry.String), t.Retry); err != nil {
			return nil, fmt.Errorf("task %s: retry policy: %w", t.ID, err)
		}
	}
	t.RunAt, t.CreatedAt, t.UpdatedAt = fromUS(runAt), fromUS(created), fromUS(updated)
	t.Timeout = bt.Duration(time.Duration(timeoutUS) * time.Microsecond)
	t.Deadline, t.AttemptedAt, t.LeaseExpiresAt = fromNullUS(deadline), fromNullUS(attempted), fromNullUS(lease)
	t.CancelRequestedAt, t.FinalizedAt = fromNullUS(cancelReq), fromNullUS(final)
	t.FirstSeen, t.LastSeen, t.UniqueUntil = fromNullUS(first), fromNullUS(last), fromNullUS(uniqueUntil)
	t.IdempotencyKey, t.MergeKey, t.TraceParent = idem.String, merge.String, trace.String
	t.LastError, t.WorkerID, t.ExecutionID = lastErr.String, worker.String, exec.String
	t.DeadReason, t.DLQStatus, t.ReplayedFrom = bt.DeadReason(dead.String), bt.DLQStatus(dlq.String), replFrom.String
	return &t, nil
}

func scanTasks(rows *sql.Rows) ([]*bt.Task, error) {
	defer rows.Close()
	var out []*bt.Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// loadSpilled fills the payload of spilled tasks from backstop_payloads.
func loadSpilled(ctx context.Context, q querier, tasks []*bt.Task) error {
	for _, t := range tasks {
		if !t.PayloadSpilled {
			continue
		}
		var data []byte
		if err := q.QueryRowContext(ctx, `SELECT data FROM backstop_payloads WHERE task_id = ?`, t.ID).Scan(&data); err != nil {
			return fmt.Errorf("task %s: spilled payload: %w", t.ID, err)
		}
		t.Payload = json.RawMessage(data)
	}
	return nil
}

func (s *Store) Enqueue(ctx context.Context, tasks []*bt.Task, opts store.EnqueueOpts) ([]store.EnqueueResult, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	res, woke, err := enqueue(ctx, tx, tasks, opts)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	s.hub.notify(woke)
	return res, nil
}

func (s *Store) EnqueueTx(ctx context.Context, tx any, tasks []*bt.Task, opts store.EnqueueOpts) ([]store.EnqueueResult, error) {
	sqlTx, ok := tx.(*sql.Tx)
	if !ok {
		return nil, fmt.Errorf("sqlite: EnqueueTx needs a *sql.Tx, got %T", tx)
	}
	res, woke, err := enqueue(ctx, sqlTx, tasks, opts)
	if err != nil {
		return nil, err
	}
	// Workers claim through the same single writer connection, so they see
	// these rows only once the caller commits.
	s.hub.notify(woke)
	return res, nil
}

const insertCols = `id, queue, kind, state, priority, max_attempts, payload, payload_size, payload_spilled,
attributes, run_at, created_at, updated_at, timeout_us, deadline, retry_policy, idempotency_key,
merge_key, progress_total, progress_completed, complexity, trace_parent, replayed_from`

const insertColCount = 23

// attrsArg is the index of attributes in insertArgs.
const attrsArg = 9

// insertTasksSQL starts a multi-row insert whose rows are "(?1," followed
// by insertColCount placeholders: ?1 is every row's event_seqs.
const insertTasksSQL = `INSERT INTO backstop_tasks (event_seqs, ` + insertCols + `) VALUES `

func insertArgs(t *bt.Task, inline []byte) ([]any, error) {
	var attrs, retry any
	if len(t.Attributes) > 0 {
		b, err := json.Marshal(t.Attributes)
		if err != nil {
			return nil, err
		}
		attrs = string(b)
	}
	if t.Retry != nil {
		b, err := json.Marshal(t.Retry)
		if err != nil {
			return nil, err
		}
		retry = string(b)
	}
	var payload any
	if inline != nil {
		payload = inline
	}
	return []any{t.ID, t.Queue, t.Kind, string(t.State), t.Priority, t.MaxAttempts, payload,
		t.PayloadSize, t.PayloadSpilled, attrs, us(t.RunAt), us(t.CreatedAt), us(t.UpdatedAt),
		time.Duration(t.Timeout).Microseconds(), usPtr(t.Deadline), retry, nullStr(t.IdempotencyKey),
		nullStr(t.MergeKey), t.Progress.Total, t.Progress.Completed, t.Complexity,
		nullStr(t.TraceParent), nullStr(t.ReplayedFrom)}, nil
}

// prepareSpill decides inline vs spilled storage for t's payload and returns
// the inline bytes (nil when spilled).
func prepareSpill(t *bt.Task, limit int) []byte {
	t.PayloadSize = len(t.Payload)
	t.PayloadSpilled = limit > 0 && len(t.Payload) > limit
	if t.PayloadSpilled {
		return nil
	}
	return t.Payload
}

const insertChunk = 1000 // 23 params each: well under SQLite's 32766

func enqueue(ctx context.Context, q querier, tasks []*bt.Task, opts store.EnqueueOpts) ([]store.EnqueueResult, map[string]struct{}, error) {
	res := make([]store.EnqueueResult, len(tasks))
	woke := map[string]struct{}{}
	actor := store.ActorFrom(ctx, store.DefaultActor)
	var events []bt.Event // task.enqueued, in the same transaction
	var plain []*bt.Task
	for i, t := range tasks {
		res[i].Task = t
		if t.IdempotencyKey == "" && t.MergeKey == "" {
			plain = append(plain, t)
			continue
		}
		// Keyed tasks go one by one, in order, so later ones see earlier ones.
		if t.IdempotencyKey != "" {
			// The holder of the key: a live task without a window, or the
			// newest one whose window is open.
			existing, err := scanTask(q.QueryRowContext(ctx, `SELECT `+taskCols+` FROM backstop_tasks
				WHERE idempotency_key = ? AND ((unique_until IS NULL AND state IN ('scheduled','pending','running','buffered'))
					OR unique_until > ?)
				ORDER BY created_at DESC, id DESC LIMIT 1`, t.IdempotencyKey, us(t.CreatedAt)))
			if err == nil {
				if err := loadSpilled(ctx, q, []*bt.Task{existing}); err != nil {
					return nil, nil, err
				}
				res[i] = store.EnqueueResult{Task: existing, Duplicate: true}
				events = append(events, store.FoldedEvent(existing, t, false, actor))
				continue
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return nil, nil, err
			}
		}
		if t.MergeKey != "" {
			d := opts.DebounceOf(i)
			merged, err := mergeInto(ctx, q, t, opts, d)
			if err != nil {
				return nil, nil, err
			}
			if merged != nil {
				res[i] = store.EnqueueResult{Task: merged, Merged: true}
				if d.Debounced {
					events = append(events, store.DebouncedEvent(merged, t, actor))
					if merged.State == bt.StatePending { // due at its max wait
						woke[merged.Queue] = struct{}{}
					}
				} else {
					events = append(events, store.FoldedEvent(merged, t, true, actor))
				}
				continue
			}
		}
		if _, err := insertTasks(ctx, q, []*bt.Task{t}, opts.InlineLimit, 0); err != nil {
			return nil, nil, err
		}
		// Inserted without its window, the row met the live tasks holding
		// the key without one; now it leaves their index.
		if t.UniqueUntil != nil {
			if _, err := q.ExecContext(ctx, `UPDATE backstop_tasks SET unique_until = ? WHERE id = ?`, us(*t.UniqueUntil), t.ID); err != nil {
				return nil, nil, err
			}
		}
		if d := opts.DebounceOf(i); d.Debounced {
			if _, err := q.ExecContext(ctx, `UPDATE backstop_tasks SET debounce_for_us = ?, debounce_until = ? WHERE id = ?`,
				d.For.Microseconds(), usPtr(d.Until(t.CreatedAt)), t.ID); err != nil {
				return nil, nil, err
			}
		}
		events = append(events, store.EnqueuedEvent(t, actor))
		if t.State == bt.StatePending {
			woke[t.Queue] = struct{}{}
		}
	}
	if len(plain) > 0 {
		// The keyed tasks' events come first, as they were enqueued first.
		if err := insertEvents(ctx, q, events); err != nil {
			return nil, nil, err
		}
		events = nil
		if err := enqueuePlain(ctx, q, plain, opts.InlineLimit, actor); err != nil {
			return nil, nil, err
		}
	}
	for _, t := range plain {
		if t.State == bt.StatePending {
			woke[t.Queue] = struct{}{}
		}
	}
	events = append(events, opts.Events...) // the engine's (task.too_complex)
	if err := insertEvents(ctx, q, events); err != nil {
		return nil, nil, err
	}
	if err := insertOrdering(ctx, q, res); err != nil { // ordering.go
		return nil, nil, err
	}
	return res, woke, nil
}

// enqueuePlain inserts new tasks that have neither idempotency nor merge
// key, insertChunk at a time, each chunk with its task.enqueued row: the
// chunk's tasks record that row's seq in event_seqs as they are inserted
// (no backstop_event_subjects entry per task, as on the hot path).
func enqueuePlain(ctx context.Context, q querier, plain []*bt.Task, inlineLimit int, actor string) error {
	var seq int64
	if err := q.QueryRowContext(ctx, `SELECT `+nextEventSeq).Scan(&seq); err != nil {
		return fmt.Errorf("sqlite: events: next seq: %w", err)
	}
	rows := make([]*evRow, 0, (len(plain)+insertChunk-1)/insertChunk)
	for start := 0; start < len(plain); start += insertChunk {
		chunk := plain[start:min(start+insertChunk, len(plain))]
		attrs, err := insertTasks(ctx, q, chunk, inlineLimit, seq+int64(len(rows)))
		if err != nil {
			return err
		}
		rows = append(rows, enqueuedRow(chunk, attrs, actor)) // events_write.go
	}
	return insertRows(ctx, q, rows, seq, false)
}

// insertTasks inserts tasks with one statement and returns their
// attributes as stored ("" for none). evSeq > 0 is recorded in their
// event_seqs: the seq of the log row holding their task.enqueued events.
func insertTasks(ctx context.Context, q querier, tasks []*bt.Task, inlineLimit int, evSeq int64) ([]string, error) {
	if len(tasks) == 0 {
		return nil, nil
	}
	var sb strings.Builder
	sb.Grow(len(insertTasksSQL) + len(tasks)*(2*insertColCount+3))
	sb.WriteString(insertTasksSQL)
	row := "(?1," + placeholders(insertColCount) + ")"
	args := make([]any, 0, len(tasks)*insertColCount+1)
	var seqs any // NULL: the task's events are in backstop_event_subjects
	if evSeq > 0 {
		seqs = "," + strconv.FormatInt(evSeq, 10)
	}
	args = append(args, seqs)
	attrs := make([]string, len(tasks))
	for i, t := range tasks {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(row)
		a, err := insertArgs(t, prepareSpill(t, inlineLimit))
		if err != nil {
			return nil, err
		}
		if s, ok := a[attrsArg].(string); ok {
			attrs[i] = s
		}
		args = append(args, a...)
	}
	if _, err := q.ExecContext(ctx, sb.String(), args...); err != nil {
		if isUnique(err) {
			return nil, conflictingIDs(ctx, q, tasks, err)
		}
		return nil, err
	}
	for _, t := range tasks {
		if t.PayloadSpilled {
			if _, err := q.ExecContext(ctx, `INSERT INTO backstop_payloads (task_id, data) VALUES (?, ?)`, t.ID, []byte(t.Payload)); err != nil {
				return nil, err
			}
		}
	}
	return attrs, nil
}

func isUnique(err error) bool {
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}

// conflictingIDs turns a unique violation into an error naming the id.
func conflictingIDs(ctx context.Context, q querier, tasks []*bt.Task, cause error) error {
	seen := map[string]bool{}
	for _, t := range tasks {
		if seen[t.ID] {
			return fmt.Errorf("%w: task id %q appears twice in the batch", store.ErrConflict, t.ID)
		}
		seen[t.ID] = true
		var one int
		err := q.QueryRowContext(ctx, `SELECT 1 FROM backstop_tasks WHERE id = ?`, t.ID).Scan(&one)
		if err == nil {
			return fmt.Errorf("%w: a task with id %q already exists", store.ErrConflict, t.ID)
		}
	}
	return fmt.Errorf("%w: %v", store.ErrConflict, cause)
}

// mergeInto merges t into the waiting task with the same kind and merge key,
// returning nil when there is none; a debounced merge also moves the
// waiting task's run time.
func mergeInto(ctx context.Context, q querier, t *bt.Task, opts store.EnqueueOpts, d store.Debounce) (*bt.Task, error) {
	existing, err := scanTask(q.QueryRowContext(ctx, `SELECT `+taskCols+` FROM backstop_tasks
		WHERE kind = ? AND merge_key = ? AND state IN ('scheduled','pending')`, t.Kind, t.MergeKey))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if err := loadSpilled(ctx, q, []*bt.Task{existing}); err != nil {
		return nil, err
	}
	if opts.Merge == nil {
		return nil, errors.New("sqlite: merge_key given but no merge function")
	}
	payload, err := opts.Merge(existing.Kind, existing.Payload, existing.MergeCount, t.Payload)
	if err != nil {
		return nil, fmt.Errorf("merge into task %s: %w", existing.ID, err)
	}
	existing.Payload = payload
	wasSpilled := existing.PayloadSpilled
	inline := prepareSpill(existing, opts.InlineLimit)
	existing.MergeCount++
	existing.UpdatedAt = t.UpdatedAt
	if d.Debounced {
		existing.RunAt = d.DebouncedRunAt(existing, t)
		existing.State = bt.StatePending
		if existing.RunAt.After(t.UpdatedAt) {
			existing.State = bt.StateScheduled
		}
	}
	var inlineArg any
	if inline != nil {
		inlineArg = inline
	}
	if _, err := q.ExecContext(ctx, `UPDATE backstop_tasks SET payload = ?, payload_size = ?, payload_spilled = ?,
		merge_count = ?, updated_at = ?, run_at = ?, state = ? WHERE id = ?`, inlineArg, existing.PayloadSize, existing.PayloadSpilled,
		existing.MergeCount, us(existing.UpdatedAt), us(existing.RunAt), string(existing.State), existing.ID); err != nil {
		return nil, err
	}
	if d.Debounced {
		if _, err := q.ExecContext(ctx, `UPDATE backstop_tasks SET debounce_for_us = ?, debounce_until = ? WHERE id = ?`,
			d.For.Microseconds(), usPtr(d.Until(existing.CreatedAt)), existing.ID); err != nil {
			return nil, err
		}
	}
	switch {
	case existing.PayloadSpilled:
		if _, err := q.ExecContext(ctx, `INSERT INTO backstop_payloads (task_id, data) VALUES (?, ?)
			ON CONFLICT (task_id) DO UPDATE SET data = excluded.data`, existing.ID, []byte(payload)); err != nil {
			return nil, err
		}
	case wasSpilled:
		if _, err := q.ExecContext(ctx, `DELETE FROM backstop_payloads WHERE task_id = ?`, existing.ID); err != nil {
			return nil, err
		}
	}
	return existing, nil
}

// executionIDPrefix returns the first 24 hex digits (with dashes) of a
// fresh UUIDv7 and the offset it implies (executionOffset); the claim
// completes each execution id with 12 hex digits from the row id plus the
// offset. The ids are valid, time-ordered UUIDv7s, unique because the
// prefix is fresh per claim and the row ids are distinct within it — and
// SQLite does not have to make 100 random UUIDs in SQL per claim. The
// settle reads the row id back (executionRowid) to seek the task's row
// without the id index.
func executionIDPrefix() (string, int64, error) {
	u, err := uuid.NewV7()
	if err != nil {
		return "", 0, err
	}
	prefix := u.String()[:24] // xxxxxxxx-xxxx-7xxx-yxxx-
	return prefix, executionOffset(prefix), nil
}

// rowidMask keeps the 48 bits an execution id's last 12 hex digits hold.
const rowidMask = 1<<48 - 1

// executionOffset is the offset of an execution id's last 12 hex digits
// from its task's row id: FNV-1a of the prefix, 48 bits, so the digits
// look random and the settle can subtract it again.
func executionOffset(prefix string) int64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(prefix); i++ {
		h = (h ^ uint64(prefix[i])) * 1099511628211
	}
	return int64(h & rowidMask)
}

// executionRowid is the row id a claim's execution id names, or -1 for an
// id not of that form. A row id is a hint only: the settle also matches
// the task id and the execution id (a row id read from an id written
// before executionOffset, or changed by a VACUUM, finds no row, and the
// task is then looked for by its id).
func executionRowid(executionID string) int64 {
	if len(executionID) != 36 {
		return -1
	}
	var n int64
	for i := 24; i < 36; i++ {
		c := executionID[i]
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | int64(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | int64(c-'a'+10)
		default:
			return -1
		}
	}
	return (n - executionOffset(executionID[:24])) & rowidMask
}

func (s *Store) Claim(ctx context.Context, p store.ClaimParams) ([]*bt.Task, error) {
	if p.Max <= 0 {
		return nil, nil
	}
	if p.Fair && s.procedures.FairOneValue(ctx, p) {
		p.Fair = false // one value waits: its fair order is the plain one (store.FairOneValueFor)
	}
	optimistic := p.Limited && !p.Fair && s.mayClaimOptimistically(p) // limits.go
	tasks, err := s.claimTx(ctx, p, optimistic)
	if errors.Is(err, errLimitOverrun) {
		s.limitBinding.Store(p.Queue, p.Now)
		tasks, err = s.claimTx(ctx, p, false)
	}
	if err != nil {
		return nil, err
	}
	sort.Slice(tasks, func(i, j int) bool {
		a, b := tasks[i], tasks[j]
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		if !a.RunAt.Equal(b.RunAt) {
			return a.RunAt.Before(b.RunAt)
		}
		return a.ID < b.ID
	})
	if err := loadSpilled(ctx, s.r, tasks); err != nil {
		return nil, err
	}
	return tasks, nil
}

// claimTx claims in one transaction of the writer: the plain claim, or
// with p.Fair the fair one (within the limits with p.Limited: fair.go),
// with p.Limited alone the limited one (optimistic: limits.go).
func (s *Store) claimTx(ctx context.Context, p store.ClaimParams, optimistic bool) ([]*bt.Task, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	var tasks []*bt.Task
	switch {
	case p.Fair:
		tasks, err = s.claimFair(ctx, tx, p) // fair.go
	case !p.Limited:
		tasks, err = s.claimIn(ctx, tx, p, p.Max, kindFilter(p.Kinds))
	case optimistic:
		tasks, err = s.claimOptimistic(ctx, tx, p) // limits.go
	default:
		tasks, err = s.claimLimited(ctx, tx, p) // limits.go
	}
	if err != nil {
		return nil, err
	}
	return tasks, tx.Commit()
}

// claimFilter narrows a claim's tasks: SQL starting with " AND", and its
// arguments.
type claimFilter struct {
	sql  string
	args []any
}

// kindFilter narrows a claim to kinds (none: any kind).
func kindFilter(kinds []string) claimFilter {
	if len(kinds) == 0 {
		return claimFilter{}
	}
	f := claimFilter{sql: " AND kind IN (" + placeholders(len(kinds)) + ")"}
	for _, k := range kinds {
		f.args = append(f.args, k)
	}
	return f
}

// claimIn claims up to max claimable tasks of the queue that pass f, in
// tx (the writer's), with their task.claimed events.
func (s *Store) claimIn(ctx context.Context, tx *sql.Tx, p store.ClaimParams, max int, f claimFilter) ([]*bt.Task, error) {
	now := us(p.Now)
	prefix, off, err := executionIDPrefix()
	if err != nil {
		return nil, err
	}
	args := []any{p.WorkerID, prefix, off, now, us(p.Now.Add(p.Lease)), now, p.Queue, now, now}
	args = append(args, f.args...)
	args = append(args, p.Queue, max) // the paused-queue check, the limit
	rows, err := tx.QueryContext(ctx, `UPDATE backstop_tasks SET state = 'running', attempt = attempt + 1,
		worker_id = ?, execution_id = ? || printf('%012x', (rowid + ?) & 281474976710655), attempted_at = ?, lease_expires_at = ?, updated_at = ?,
		event_seqs = coalesce(event_seqs, '') || ',' || `+nextEventSeq+`, cancel_requested_at = NULL
		WHERE rowid IN (SELECT rowid FROM backstop_tasks WHERE state = 'pending' AND queue = ? AND run_at <= ?
			AND (deadline IS NULL OR deadline > ?)`+f.sql+`
			AND NOT EXISTS (SELECT 1 FROM backstop_queues WHERE name = ?)
			ORDER BY priority DESC, run_at, id LIMIT ?)
		RETURNING `+claimCols+`, `+nextEventSeq, args...) // the task.claimed row's seq, recorded in event_seqs
	if err != nil {
		return nil, err
	}
	tasks, attrs, seq, err := scanClaimed(rows, p)
	if err != nil {
		return nil, err
	}
	if err := claimedEvents(ctx, tx, tasks, attrs, now, us(p.Now.Add(p.Lease)), seq); err != nil {
		return nil, err
	}
	if len(tasks) > 0 { // counts.go: the update trigger skips a claim
		if err := s.moveCounts(ctx, tx, bt.StatePending, bt.StateRunning, map[string]int{p.Queue: len(tasks)}); err != nil {
			return nil, err
		}
	}
	return tasks, nil
}

// claimCols is what a claim returns: only what a handler can use and the
// claim did not just set itself (moving 38 columns per row through
// database/sql costs more than the claim's own SQL), and of that the
// columns a task rarely has set as one value, claimExtra.
const claimCols = `id, kind, priority, attempt, max_attempts, payload, payload_size, attributes,
run_at, created_at, execution_id, ` + claimExtra

// claimExtra is the columns a claimed task rarely has set, as one JSON
// array in claimExtraFields' order, NULL while all are at their defaults:
// one column scanned instead of fifteen for a task that sets none.
const claimExtra = `CASE WHEN payload_spilled = 0 AND timeout_us = 0 AND deadline IS NULL AND retry_policy IS NULL
	AND progress_total = 0 AND progress_completed = 0 AND complexity = 0 AND trace_parent IS NULL AND last_error IS NULL
	AND idempotency_key IS NULL AND merge_key IS NULL AND merge_count = 0 AND dead_count = 0 AND replay_count = 0
	AND replayed_from IS NULL THEN NULL
ELSE json_array(payload_spilled, timeout_us, deadline, retry_policy, progress_total, progress_completed, complexity,
	trace_parent, last_error, idempotency_key, merge_key, merge_count, dead_count, replay_count, replayed_from) END`

// claimExtraFields decodes claimExtra's array into t; the retry policy
// (JSON text) and the deadline and timeout (microseconds) are returned to
// be converted.
func claimExtraFields(b []byte, t *bt.Task) (retry string, deadline *int64, timeoutUS int64, err error) {
	var (
		a       [15]json.RawMessage
		spilled int
	)
	if err := json.Unmarshal(b, &a); err != nil {
		return "", nil, 0, err
	}
	for i, dst := range []any{&spilled, &timeoutUS, &deadline, &retry, &t.Progress.Total, &t.Progress.Completed,
		&t.Complexity, &t.TraceParent, &t.LastError, &t.IdempotencyKey, &t.MergeKey, &t.MergeCount, &t.DeadCount,
		&t.ReplayCount, &t.ReplayedFrom} {
		if err := json.Unmarshal(a[i], dst); err != nil {
			return "", nil, 0, err
		}
	}
	t.PayloadSpilled = spilled != 0
	return retry, deadline, timeoutUS, nil
}

// scanClaimed also returns each task's attributes as stored and the seq of
// the claim's task.claimed row (for its events).
func scanClaimed(rows *sql.Rows, p store.ClaimParams) ([]*bt.Task, []string, int64, error) {
	defer rows.Close()
	now := fromUS(us(p.Now))
	lease := fromUS(us(p.Now.Add(p.Lease)))
	var (
		out      []*bt.Task
		rawAttrs []string
		seq      int64
	)
	for rows.Next() {
		var (
			t              bt.Task
			payload, extra []byte
			attrs          sql.NullString
			runAt, created int64
		)
		if err := rows.Scan(&t.ID, &t.Kind, intCol{&t.Priority}, intCol{&t.Attempt}, intCol{&t.MaxAttempts}, &payload,
			intCol{&t.PayloadSize}, &attrs, int64Col{&runAt}, int64Col{&created}, &t.ExecutionID, &extra,
			int64Col{&seq}); err != nil { // scan.go
			return nil, nil, 0, err
		}
		t.Queue, t.State, t.WorkerID = p.Queue, bt.StateRunning, p.WorkerID
		t.AttemptedAt, t.LeaseExpiresAt, t.UpdatedAt = &now, &lease, now
		if payload != nil {
			t.Payload = json.RawMessage(payload)
		}
		if attrs.Valid && attrs.String != "" {
			if err := json.Unmarshal([]byte(attrs.String), &t.Attributes); err != nil {
				return nil, nil, 0, fmt.Errorf("task %s: attributes: %w", t.ID, err)
			}
		}
		if extra != nil {
			retry, deadline, timeoutUS, err := claimExtraFields(extra, &t)
			if err != nil {
				return nil, nil, 0, fmt.Errorf("task %s: %w", t.ID, err)
			}
			if retry != "" {
				t.Retry = new(bt.RetryPolicy)
				if err := json.Unmarshal([]byte(retry), t.Retry); err != nil {
					return nil, nil, 0, fmt.Errorf("task %s: retry policy: %w", t.ID, err)
				}
			}
			t.Timeout = bt.Duration(time.Duration(timeoutUS) * time.Microsecond)
			if deadline != nil {
				d := fromUS(*deadline)
				t.Deadline = &d
			}
		}
		t.RunAt, t.CreatedAt = fromUS(runAt), fromUS(created)
		out = append(out, &t)
		rawAttrs = append(rawAttrs, attrs.String)
	}
	return out, rawAttrs, seq, rows.Err()
}

func (s *Store) Heartbeat(ctx context.Context, beats []store.Beat, now, leaseUntil time.Time) ([]store.BeatResult, error) {
	if len(beats) == 0 {
		return nil, nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck
	stmt, err := tx.PrepareContext(ctx, `UPDATE backstop_tasks SET lease_expires_at = ?, updated_at = ?,
		progress_total = COALESCE(?, progress_total), progress_completed = COALESCE(?, progress_completed)
		WHERE id = ? AND execution_id = ? AND state = 'running'
		RETURNING cancel_requested_at IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	defer stmt.Close()
	out := make([]store.BeatResult, len(beats))
	var events []bt.Event
	for i, b := range beats {
		var total, done any
		if b.Progress != nil {
			total, done = b.Progress.Total, b.Progress.Completed
			ev, err := progressEvent(ctx, tx, b, now)
			if err != nil {
				return nil, err
			}
			events = append(events, ev...)
		}
		out[i].TaskID = b.TaskID
		err := stmt.QueryRowContext(ctx, us(leaseUntil), us(now), total, done, b.TaskID, b.ExecutionID).Scan(&out[i].CancelRequested)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			out[i].Lost = true
		case err != nil:
			return nil, err
		}
	}
	if err := insertEvents(ctx, tx, events); err != nil {
		return nil, err
	}
	return out, tx.Commit()
}

const settleSQL = `UPDATE backstop_tasks SET
	state = CASE WHEN ?1 IN ('pending', 'scheduled') AND cancel_requested_at IS NOT NULL THEN 'canceled' ELSE ?1 END,
	run_at = CASE WHEN ?1 IN ('pending', 'scheduled') THEN ?2 ELSE run_at END,
	attempt = attempt - ?3,
	last_error = CASE WHEN ?4 <> '' THEN ?4 ELSE last_error END,
	lease_expires_at = NULL,
	finalized_at = CASE WHEN ?1 IN ('succeeded', 'dead', 'canceled') OR cancel_requested_at IS NOT NULL THEN ?5 ELSE NULL END,
	dead_reason = CASE WHEN ?1 = 'dead' THEN ?6 ELSE dead_reason END,
	dlq_status = CASE WHEN ?1 = 'dead' THEN 'open' ELSE dlq_status END,
	first_seen = CASE WHEN ?1 = 'dead' THEN COALESCE(first_seen, ?5) ELSE first_seen END,
	last_seen = CASE WHEN ?1 = 'dead' THEN ?5 ELSE last_seen END,
	dead_count = dead_count + (?1 = 'dead'),
	progress_total = COALESCE(?7, progress_total),
	progress_completed = COALESCE(?8, progress_completed),
	updated_at = ?5
WHERE id = ?9 AND ((?10 <> '' AND state = 'running' AND execution_id = ?10)
	OR (?10 = '' AND state IN ('scheduled', 'pending')))
RETURNING attempt + ?3, COALESCE(worker_id, ''), COALESCE(attempted_at, ?5), queue, state, kind, attributes,
	run_at, dead_count`

func (s *Store) Settle(ctx context.Context, settlements []store.Settlement) ([]bool, error) {
	settlements = store.CleanSettlements(settlements) // store/text.go: an error text is never lost for its bytes
	if len(settlements) == 0 {
		return nil, nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck
	applied, woke, err := s.settle(ctx, tx, settlements)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	s.hub.notify(woke)
	return applied, nil
}

// settle is Settle's body inside tx (Settle's own, or Txs.Settle's); it
// returns the queues to wake once tx commits.
func (s *Store) settle(ctx context.Context, tx *sql.Tx, settlements []store.Settlement) ([]bool, map[string]struct{}, error) {
	if allSucceeded(settlements) {
		applied, err := s.settleSucceeded(ctx, tx, settlements)
		return applied, nil, err
	}
	return s.settleEach(ctx, tx, settlements)
}

func allSucceeded(ss []store.Settlement) bool {
	for _, st := range ss {
		if st.State != bt.StateSucceeded || st.ExecutionID == "" || st.Uncharged || st.Error != "" || st.ErrorDetail != "" {
			return false
		}
	}
	return true
}

const settleChunk = 500 // 5 parameters each: well under SQLite's limit

// settleSucceeded is the hot path: a batch of successes settled with one
// UPDATE … FROM (VALUES …) per chunk and their events, instead of two
// statements per task. Each row is sought by the row id its execution id
// names (executionRowid), the id and the lease checked on it; the few a
// row id did not find (an execution id of another form, a row id a VACUUM
// changed, a lease no longer current, a row id two settlements name) are
// looked for by id after. A success writes no execution row: its task row
// holds the attempt (succeededExecutions).
func (s *Store) settleSucceeded(ctx context.Context, tx *sql.Tx, ss []store.Settlement) ([]bool, error) {
	applied := make([]bool, len(ss))
	actor := store.ActorFrom(ctx, "")
	settleChunks := func(idx []int, byRowid bool) error {
		for start := 0; start < len(idx); start += settleChunk {
			rows, err := settleSucceededChunk(ctx, tx, ss, idx[start:min(start+settleChunk, len(idx))], byRowid)
			if err != nil {
				return err
			}
			if len(rows) == 0 {
				continue
			}
			moved := map[string]int{}
			for _, r := range rows {
				applied[r.i] = true
				moved[r.queue]++
			}
			if err := s.moveCounts(ctx, tx, bt.StateRunning, bt.StateSucceeded, moved); err != nil { // counts.go
				return err
			}
			if err := succeededEvents(ctx, tx, rows, rows[0].evSeq, actor); err != nil { // events_write.go
				return err
			}
		}
		return nil
	}
	// The first pass returns each changed row's row id, so it takes the
	// settlements naming distinct row ids only.
	first := make([]int, 0, len(ss))
	named := make(map[int64]struct{}, len(ss))
	var missed []int
	for i, st := range ss {
		r := executionRowid(st.ExecutionID)
		if _, twice := named[r]; r < 0 || twice {
			missed = append(missed, i)
			continue
		}
		named[r] = struct{}{}
		first = append(first, i)
	}
	if err := settleChunks(first, true); err != nil {
		return nil, err
	}
	for _, i := range first {
		if !applied[i] {
			missed = append(missed, i)
		}
	}
	slices.Sort(missed)
	if err := settleChunks(missed, false); err != nil {
		return nil, err
	}
	return applied, nil
}

// settleSucceededChunk settles the successes ss[i] for i in idx whose
// leases are current, each row sought by its execution id's row id
// (byRowid: the row ids are distinct) or by its id, and returns the rows
// it changed.
func settleSucceededChunk(ctx context.Context, tx *sql.Tx, ss []store.Settlement, idx []int, byRowid bool) ([]settledRow, error) {
	args := make([]any, 0, 6*len(idx))
	var (
		byRow  map[int64]int
		byExec map[string]int
	)
	if byRowid {
		byRow = make(map[int64]int, len(idx))
	} else {
		byExec = make(map[string]int, len(idx))
	}
	for _, i := range idx {
		st := ss[i]
		var total, done any
		if st.Progress != nil {
			total, done = st.Progress.Total, st.Progress.Completed
		}
		args = append(args, st.TaskID, st.ExecutionID, us(st.FinishedAt), total, done)
		if byRowid {
			r := executionRowid(st.ExecutionID)
			args = append(args, r)
			byRow[r] = i
		} else {
			byExec[st.ExecutionID] = i
		}
	}
	r, err := tx.QueryContext(ctx, settleSucceededSQL(len(idx), byRowid), args...)
	if err != nil {
		return nil, err
	}
	rows, err := scanSettled(r, byRowid)
	if err != nil {
		return nil, err
	}
	return rows, nameSettled(rows, ss, byRow, byExec)
}

// nameSettled fills each settled row from the settlement that named it:
// by its row id in byRow (when not nil), else by its execution id in
// byExec.
func nameSettled(rows []settledRow, ss []store.Settlement, byRow map[int64]int, byExec map[string]int) error {
	for k := range rows {
		row := &rows[k]
		i, ok := byExec[row.execID]
		if byRow != nil {
			i, ok = byRow[row.rowid]
		}
		if !ok {
			return fmt.Errorf("sqlite: settle: a changed row (%d %q) that no settlement named", row.rowid, row.execID)
		}
		row.i, row.execID, row.taskID, row.finished = i, ss[i].ExecutionID, ss[i].TaskID, us(ss[i].FinishedAt)
	}
	return nil
}

// settleSucceededSQL is the success settle of n rows: VALUES of (task id,
// execution id, finish time, progress total, completed[, row id]). It
// returns what the settlements do not say (the row's key: its row id, or
// with byRowid false its execution id): the attempt, the queue, kind and
// attributes the events carry, and the seq of their first row.
func settleSucceededSQL(n int, byRowid bool) string {
	var sb strings.Builder
	sb.WriteString(`UPDATE backstop_tasks SET state = 'succeeded', finalized_at = v.column3, updated_at = v.column3,
		lease_expires_at = NULL, progress_total = COALESCE(v.column4, progress_total),
		progress_completed = COALESCE(v.column5, progress_completed),
		event_seqs = coalesce(event_seqs, '') || ',' || ` + nextEventSeq + ` || ',' || (` + nextEventSeq + ` + 1)
		FROM (VALUES `)
	row := "(?,?,?,?,?)"
	if byRowid {
		row = "(?,?,?,?,?,?)"
	}
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(row)
	}
	sb.WriteString(`) AS v WHERE `)
	key := "execution_id"
	if byRowid {
		sb.WriteString(`backstop_tasks.rowid = v.column6 AND `)
		key = "rowid"
	}
	sb.WriteString(`backstop_tasks.id = v.column1 AND backstop_tasks.execution_id = v.column2 AND backstop_tasks.state = 'running'
		RETURNING ` + key + `, attempt, COALESCE(worker_id, ''), COALESCE(attempted_at, finalized_at),
			queue, kind, attributes, ` + nextEventSeq) // the seqs of its task.started and task.succeeded rows
	return sb.String()
}

// settledRow is a task a success settled: i is its settlement's index.
type settledRow struct {
	i                      int
	rowid                  int64
	execID, taskID, worker string
	attempt                int
	started, finished      int64
	queue, kind            string
	attrs                  sql.NullString
	evSeq                  int64
}

// scanSettled scans settleSucceededSQL's rows (their key: the row id with
// byRowid, else the execution id).
func scanSettled(rows *sql.Rows, byRowid bool) ([]settledRow, error) {
	defer rows.Close()
	var out []settledRow
	for rows.Next() {
		var r settledRow
		var key any = &r.execID
		if byRowid {
			key = int64Col{&r.rowid}
		}
		if err := rows.Scan(key, intCol{&r.attempt}, &r.worker, int64Col{&r.started}, &r.queue, &r.kind, &r.attrs,
			int64Col{&r.evSeq}); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// settleEach applies arbitrary settlements one by one.
func (s *Store) settleEach(ctx context.Context, tx *sql.Tx, settlements []store.Settlement) ([]bool, map[string]struct{}, error) {
	upd, err := tx.PrepareContext(ctx, settleSQL)
	if err != nil {
		return nil, nil, err
	}
	defer upd.Close()
	ins, err := tx.PrepareContext(ctx, `INSERT INTO backstop_executions
		(execution_id, task_id, attempt, worker_id, started_at, finished_at, outcome, error, error_detail)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return nil, nil, err
	}
	defer ins.Close()
	applied := make([]bool, len(settlements))
	woke := map[string]struct{}{}
	succeeded := map[string]int{} // from running, by queue: the update trigger skips them (counts.go)
	actor := store.ActorFrom(ctx, "")
	var events []bt.Event
	for i, st := range settlements {
		var total, done any
		if st.Progress != nil {
			total, done = st.Progress.Total, st.Progress.Completed
		}
		uncharged := 0
		if st.Uncharged {
			uncharged = 1
		}
		var (
			attempt   int
			worker    string
			startedAt int64
			queue     string
			newState  string
			kind      string
			attrs     sql.NullString
			runAt     int64
			deadCount int
		)
		err := upd.QueryRowContext(ctx, string(st.State), us(st.RunAt), uncharged, st.Error, us(st.FinishedAt),
			string(st.DeadReason), total, done, st.TaskID, st.ExecutionID).Scan(&attempt, &worker, &startedAt, &queue, &newState,
			&kind, &attrs, &runAt, &deadCount)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		applied[i] = true
		if newState == string(bt.StatePending) {
			woke[queue] = struct{}{}
		}
		if st.ExecutionID != "" && newState == string(bt.StateSucceeded) {
			succeeded[queue]++
		}
		set := store.SettledTask{ID: st.TaskID, Queue: queue, Kind: kind, State: bt.State(newState), Attempt: attempt,
			WorkerID: worker, StartedAt: fromUS(startedAt), RunAt: fromUS(runAt), DeadCount: deadCount}
		if set.Attributes, err = decodeAttrs(attrs); err != nil {
			return nil, nil, err
		}
		for _, e := range store.SettleEvents(st, set) {
			e.Actor = actor
			events = append(events, e)
		}
		if st.ExecutionID == "" || (newState == string(bt.StateSucceeded) && st.Outcome == bt.OutcomeSucceeded &&
			st.Error == "" && st.ErrorDetail == "" && !st.Uncharged) {
			// A bare success's attempt is its task row's (succeededExecutions);
			// one with an output or an error text keeps its execution row.
			continue
		}
		if _, err := ins.ExecContext(ctx, st.ExecutionID, st.TaskID, attempt, worker, startedAt, us(st.FinishedAt),
			string(st.Outcome), nullStr(st.Error), nullStr(st.ErrorDetail)); err != nil {
			return nil, nil, err
		}
	}
	if err := insertEvents(ctx, tx, events); err != nil {
		return nil, nil, err
	}
	if err := s.moveCounts(ctx, tx, bt.StateRunning, bt.StateSucceeded, succeeded); err != nil {
		return nil, nil, err
	}
	return applied, woke, nil
}

func (s *Store) RequestCancel(ctx context.Context, id string, now time.Time) (*bt.Task, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck
	var state string
	err = tx.QueryRowContext(ctx, `SELECT state FROM backstop_tasks WHERE id = ?`, id).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("task %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	switch bt.State(state) {
	case bt.StateScheduled, bt.StatePending, bt.StateBuffered:
		_, err = tx.ExecContext(ctx, `UPDATE backstop_tasks SET state = 'canceled', finalized_at = ?, updated_at = ?,
			cancel_requested_at = ? WHERE id = ?`, us(now), us(now), us(now), id)
	case bt.StateRunning:
		_, err = tx.ExecContext(ctx, `UPDATE backstop_tasks SET cancel_requested_at = COALESCE(cancel_requested_at, ?),
			updated_at = ? WHERE id = ?`, us(now), us(now), id)
	default:
		return nil, fmt.Errorf("%w: task %q is %s and cannot be canceled", store.ErrConflict, id, state)
	}
	if err != nil {
		return nil, err
	}
	t, err := getTask(ctx, tx, id)
	if err != nil {
		return nil, err
	}
	if err := insertEvents(ctx, tx, []bt.Event{store.CancelEvent(t, bt.State(state), now, store.ActorFrom(ctx, store.DefaultActor), store.ReasonFrom(ctx))}); err != nil {
		return nil, err
	}
	return t, tx.Commit()
}

func getTask(ctx context.Context, q querier, id string) (*bt.Task, error) {
	t, err := scanTask(q.QueryRowContext(ctx, `SELECT `+taskCols+` FROM backstop_tasks WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("task %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if err := loadSpilled(ctx, q, []*bt.Task{t}); err != nil {
		return nil, err
	}
	return t, nil
}

func (s *Store) Get(ctx context.Context, id string) (*bt.Task, error) {
	t, err := getTask(ctx, s.r, id)
	if err != nil {
		return nil, err
	}
	t.Executions, err = s.Executions(ctx, id)
	return t, err
}

// A succeeded task's last attempt is not a row of backstop_executions:
// the task row holds all of it (execution_id, attempt, worker_id,
// attempted_at, finalized_at), and the success settle writes nothing else
// (migration 00049). succeededExecutions reads those executions from the
// task rows of the FROM item from (aliased t), in collectExecutions'
// columns; a row whose attempt is already in backstop_executions (written
// before 00049) gives none.
func succeededExecutions(from string) string {
	return `SELECT t.execution_id, t.id, t.attempt, COALESCE(t.worker_id, ''), COALESCE(t.attempted_at, t.finalized_at),
		t.finalized_at, 'succeeded', '', ''
	FROM ` + from + `
	WHERE t.state = 'succeeded' AND t.execution_id IS NOT NULL
		AND NOT EXISTS (SELECT 1 FROM backstop_executions x WHERE x.task_id = t.id AND x.execution_id = t.execution_id)`
}

var sqlExecutions = `SELECT execution_id, task_id, attempt, worker_id, started_at, finished_at,
	outcome, COALESCE(error, ''), COALESCE(error_detail, '') FROM backstop_executions WHERE task_id = ?1
UNION ALL
` + succeededExecutions("backstop_tasks t") + ` AND t.id = ?1
ORDER BY 5, 3, 1`

func (s *Store) Executions(ctx context.Context, taskID string) ([]bt.Execution, error) {
	rows, err := s.r.QueryContext(ctx, sqlExecutions, taskID)
	if err != nil {
		return nil, err
	}
	return collectExecutions(rows)
}

// collectExecutions reads and closes rows of (execution_id, task_id,
// attempt, worker_id, started_at, finished_at, outcome, error,
// error_detail).
func collectExecutions(rows *sql.Rows) ([]bt.Execution, error) {
	defer rows.Close()
	out := []bt.Execution{}
	for rows.Next() {
		var (
			e        bt.Execution
			started  int64
			finished sql.NullInt64
			outcome  string
		)
		if err := rows.Scan(&e.ExecutionID, &e.TaskID, &e.Attempt, &e.WorkerID, &started, &finished, &outcome,
			&e.Error, &e.ErrorDetail); err != nil {
			return nil, err
		}
		e.StartedAt, e.FinishedAt, e.Outcome = fromUS(started), fromNullUS(finished), bt.Outcome(outcome)
		out = append(out, e)
	}
	return out, rows.Err()
}

func (s *Store) List(ctx context.Context, f store.ListFilter) ([]*bt.Task, error) {
	if f.Where != "" {
		x, err := filter.Compile(f.Where)
		if err != nil {
			return nil, fmt.Errorf("where: %w", err)
		}
		if !x.InSQL() {
			return filter.Scan(ctx, x, f, s.List)
		}
	}
	// One read transaction: the kept counts and the page agree.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	q, args, err := listStatement(ctx, tx, f)
	if err != nil || q == "" {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	tasks, err := scanTasks(rows)
	_ = tx.Rollback() // read only; its connection back before the spilled payloads' read
	if err != nil || f.WithoutPayload {
		return tasks, err
	}
	return tasks, loadSpilled(ctx, s.r, tasks)
}

// listStatement is List's statement for f and its arguments, the kept
// counts read in tx (listHeld); "" when the counts say the filter's
// states hold no task.
func listStatement(ctx context.Context, tx *sql.Tx, f store.ListFilter) (string, []any, error) {
	where, args := listWhere(f)
	if f.AfterID != "" {
		where, args = append(where, "id "+store.CursorOp(f.Newest)+" ?"), append(args, f.AfterID)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	cols := taskCols
	if f.WithoutPayload {
		cols = summaryCols
	}
	dir := store.OrderDir(f.Newest)
	if len(f.States) > 0 {
		held, sorted, err := listHeld(ctx, tx, f)
		if err != nil || len(held) == 0 {
			return "", nil, err
		}
		if sorted {
			q, args := sortedListQuery(cols, where, args, held, dir, limit)
			return q, args, nil
		}
	}
	q := `SELECT ` + cols + ` FROM backstop_tasks`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	return q + " ORDER BY id " + dir + " LIMIT ?", append(args, limit), nil
}

func (s *Store) ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]*bt.Task, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+taskCols+` FROM backstop_tasks
		WHERE state = 'running' AND lease_expires_at < ? ORDER BY lease_expires_at LIMIT ?`, us(now), limit)
	if err != nil {
		return nil, err
	}
	return scanTasks(rows)
}

func (s *Store) PastDeadline(ctx context.Context, now time.Time, limit int) ([]*bt.Task, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+taskCols+` FROM backstop_tasks
		WHERE deadline IS NOT NULL AND state IN ('scheduled', 'pending') AND deadline < ? ORDER BY deadline LIMIT ?`, us(now), limit)
	if err != nil {
		return nil, err
	}
	return scanTasks(rows)
}

func (s *Store) PromoteScheduled(ctx context.Context, now time.Time, limit int) (int, error) {
	rows, err := s.w.QueryContext(ctx, `UPDATE backstop_tasks SET state = 'pending', updated_at = ?
		WHERE id IN (SELECT id FROM backstop_tasks WHERE state = 'scheduled' AND run_at <= ? ORDER BY run_at LIMIT ?)
		RETURNING queue`, us(now), us(now), limit)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	woke := map[string]struct{}{}
	for rows.Next() {
		var q string
		if err := rows.Scan(&q); err != nil {
			return n, err
		}
		woke[q] = struct{}{}
		n++
	}
	if err := rows.Err(); err != nil {
		return n, err
	}
	s.hub.notify(woke)
	return n, nil
}

// DLQGroups implements store.APIStore.
func (s *Store) DLQGroups(ctx context.Context, f store.ListFilter, errorLimit int) (*store.DLQGroups, error) {
	if f.Where != "" {
		if _, _, err := whereCond(f.Where); err != nil {
			return nil, err
		}
	}
	// Without a queue, the literal state = 'dead' (not a parameter) lets
	// the planner use the partial indexes on dead tasks (migration 00014),
	// covering when the filter is the status; with a queue, the queue's
	// rows are fewer: the parameter leaves the (queue, state) index to it.
	cond := "state = 'dead'"
	if f.Queue != "" {
		cond, f.States = "true", []bt.State{bt.StateDead}
	} else {
		f.States = nil
	}
	where, args := listWhere(f)
	cond = strings.Join(append([]string{cond}, where...), " AND ")
	g := &store.DLQGroups{ByReason: []store.GroupCount{}, ByError: []store.GroupCount{}}
	read := func(col string, limit int, into *[]store.GroupCount) error {
		return readGroups(ctx, s, `SELECT `+col+`, count(*) FROM backstop_tasks WHERE `+cond+`
			GROUP BY `+col+` ORDER BY 2 DESC, 1 LIMIT ?`, append(slices.Clone(args), limit), into)
	}
	// A filter of dead-letter statuses and a queue only (the Dead letters
	// page) reads the kept counts of its groups (migration 00052): a few
	// rows per group, whatever the number of dead letters.
	if store.GroupsKept(f) {
		kept, kargs := []string{"true"}, []any{}
		if len(f.DLQStatuses) > 0 {
			kept = append(kept, "dlq_status IN ("+strings.TrimSuffix(strings.Repeat("?, ", len(f.DLQStatuses)), ", ")+")")
			for _, st := range f.DLQStatuses {
				kargs = append(kargs, string(st))
			}
		}
		if f.Queue != "" {
			kept, kargs = append(kept, "queue = ?"), append(kargs, f.Queue)
		}
		cond, args = strings.Join(kept, " AND "), kargs
		read = func(col string, limit int, into *[]store.GroupCount) error {
			v := map[string]string{"dead_reason": "CASE WHEN reason_null THEN NULL ELSE reason END",
				"substr(last_error, 1, 200)": "CASE WHEN error_null THEN NULL ELSE error END"}[col]
			return readGroups(ctx, s, `SELECT `+v+` AS v, sum(n) FROM backstop_dlq_group_counts WHERE `+cond+`
				GROUP BY v HAVING sum(n) > 0 ORDER BY 2 DESC, 1 LIMIT ?`, append(slices.Clone(args), limit), into)
		}
	}
	if err := read("dead_reason", 1000, &g.ByReason); err != nil {
		return nil, fmt.Errorf("sqlite: dead letters by reason: %w", err)
	}
	if err := read("substr(last_error, 1, 200)", errorLimit+1, &g.ByError); err != nil {
		return nil, fmt.Errorf("sqlite: dead letters by error: %w", err)
	}
	g.ByError, g.MoreErrors = store.CapGroups(g.ByError, errorLimit)
	for _, c := range g.ByReason {
		g.Total += c.Count
	}
	return g, nil
}

// readGroups appends the groups q answers (value, count) to into.
func readGroups(ctx context.Context, s *Store, q string, args []any, into *[]store.GroupCount) error {
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			v *string // NULL: grouped as ""
			c store.GroupCount
		)
		if err := rows.Scan(&v, &c.Count); err != nil {
			return err
		}
		if v != nil {
			c.Value = *v
		}
		*into = append(*into, c)
	}
	return rows.Err()
}

// sqlMinuteSucceeded counts the successes of each minute of a span
// through backstop_tasks_finished (its WHERE term repeated: ops.go,
// sqlDoomedFinished).
const sqlMinuteSucceeded = `SELECT finalized_at / 60000000, count(*) FROM backstop_tasks
	WHERE state IN ('succeeded', 'canceled') AND state = 'succeeded' AND finalized_at >= ? AND finalized_at < ? GROUP BY 1`

// Activity implements store.APIStore (times are microseconds).
func (s *Store) Activity(ctx context.Context, since, until time.Time) (map[int64]store.MinuteActivity, error) {
	out := map[int64]store.MinuteActivity{}
	for _, q := range []struct {
		sql string
		add func(a *store.MinuteActivity, n int)
	}{
		{sqlMinuteSucceeded,
			func(a *store.MinuteActivity, n int) { a.Succeeded += n }},
		{`SELECT finished_at / 60000000, count(*) FROM backstop_executions
			WHERE outcome IN ('transient_error', 'permanent_error', 'timeout', 'lease_expired') AND finished_at >= ? AND finished_at < ? GROUP BY 1`,
			func(a *store.MinuteActivity, n int) { a.Failed += n }},
		{`SELECT last_seen / 60000000, count(*) FROM backstop_tasks WHERE state = 'dead' AND last_seen >= ? AND last_seen < ? GROUP BY 1`,
			func(a *store.MinuteActivity, n int) { a.Dead += n }},
	} {
		rows, err := s.r.QueryContext(ctx, q.sql, us(since), us(until))
		if err != nil {
			return nil, fmt.Errorf("sqlite: activity: %w", err)
		}
		for rows.Next() {
			var m int64
			var n int
			if err := rows.Scan(&m, &n); err != nil {
				rows.Close()
				return nil, fmt.Errorf("sqlite: activity: %w", err)
			}
			a := out[m]
			q.add(&a, n)
			out[m] = a
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("sqlite: activity: %w", err)
		}
	}
	return out, nil
}

// runAttribute is the attribute that names a task's run (the library's
// RunAttribute), which the index of migration 00041 holds.
const runAttribute = "run_id"

// listWhere turns a filter (but its cursor) into conditions and arguments.
func listWhere(f store.ListFilter) ([]string, []any) {
	var (
		where []string
		args  []any
	)
	add := func(cond string, a ...any) { where = append(where, cond); args = append(args, a...) }
	if f.Queue != "" {
		add("queue = ?", f.Queue)
	}
	if f.Kind != "" {
		add("kind = ?", f.Kind)
	}
	if len(f.States) > 0 {
		ph := make([]any, len(f.States))
		for i, st := range f.States {
			ph[i] = string(st)
		}
		add("state IN ("+placeholders(len(ph))+")", ph...)
	}
	if f.Reason != "" {
		add("dead_reason = ?", string(f.Reason))
	}
	for k, v := range f.Attrs {
		if k == runAttribute { // the expression of the run index (migration 00041)
			add("json_extract(attributes, '$.run_id') = ?", v)
			continue
		}
		add("json_extract(attributes, ?) = ?", `$."`+k+`"`, v)
	}
	if len(f.DLQStatuses) > 0 {
		ph := make([]any, len(f.DLQStatuses))
		for i, st := range f.DLQStatuses {
			ph[i] = string(st)
		}
		add("dlq_status IN ("+placeholders(len(ph))+")", ph...)
	}
	if f.ErrorContains != "" {
		add("instr(last_error, ?) > 0", f.ErrorContains)
	}
	if !f.Since.IsZero() {
		add("last_seen >= ?", us(f.Since))
	}
	if !f.Until.IsZero() {
		add("last_seen <= ?", us(f.Until))
	}
	if f.IdempotencyKey != "" {
		add("idempotency_key = ?", f.IdempotencyKey)
	}
	if !f.CreatedSince.IsZero() {
		add("created_at >= ?", us(f.CreatedSince))
	}
	if !f.CreatedUntil.IsZero() {
		add("created_at <= ?", us(f.CreatedUntil))
	}
	if f.Where != "" {
		// List and DLQGroups check the where first; the client takes one
		// that does not translate through its Go path (countRedrive, the
		// one-by-one replay), never here: selecting nothing is the safe side.
		cond, wargs, err := whereCond(f.Where)
		if err != nil {
			cond, wargs = "0", nil
		}
		add(cond, wargs...)
	}
	return where, args
}

// whereDocs are the JSON documents a where condition reads: the payload,
// inline or spilled, and the attributes.
var whereDocs = filter.Docs{
	Payload: `COALESCE(CAST(payload AS TEXT), (SELECT CAST(data AS TEXT) FROM backstop_payloads WHERE task_id = backstop_tasks.id))`,
	Attrs:   `attributes`,
}

// whereCond is a where expression's SQL condition on backstop_tasks
// (internal/filter) and its arguments.
func whereCond(w string) (string, []any, error) {
	x, err := filter.Compile(w)
	if err != nil {
		return "", nil, fmt.Errorf("where: %w", err)
	}
	var args []any
	cond, ok := x.SQL(filter.SQLite, whereDocs, func(v any) string {
		args = append(args, v)
		return "?"
	})
	if !ok {
		return "", nil, filter.ErrNotInSQL
	}
	return cond, args, nil
}

// decodeAttrs reads a task's attributes column.
func decodeAttrs(a sql.NullString) (map[string]string, error) {
	if !a.Valid || a.String == "" {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(a.String), &m); err != nil {
		return nil, fmt.Errorf("attributes: %w", err)
	}
	return m, nil
}

// progressEvent is the task.progress event of a beat whose progress differs
// from the stored one (none when the lease is not current or nothing
// changed).
func progressEvent(ctx context.Context, q querier, b store.Beat, now time.Time) ([]bt.Event, error) {
	var (
		t     bt.Task
		old   bt.Progress
		attrs sql.NullString
	)
	err := q.QueryRowContext(ctx, `SELECT queue, kind, attributes, progress_total, progress_completed FROM backstop_tasks
		WHERE id = ? AND execution_id = ? AND state = 'running'`, b.TaskID, b.ExecutionID).Scan(&t.Queue, &t.Kind, &attrs,
		&old.Total, &old.Completed)
	if errors.Is(err, sql.ErrNoRows) || err == nil && old == *b.Progress {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	t.ID = b.TaskID
	if t.Attributes, err = decodeAttrs(attrs); err != nil {
		return nil, err
	}
	ev := store.ProgressEvent(&t, b.ExecutionID, *b.Progress, now)
	ev.Actor = store.ActorFrom(ctx, "")
	return []bt.Event{ev}, nil
}
