package pgstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Enqueue implements store.Store.
func (s *Store) Enqueue(ctx context.Context, tasks []*bt.Task, opts store.EnqueueOpts) ([]store.EnqueueResult, error) {
	if err := checkEnqueue(tasks, opts); err != nil || len(tasks) == 0 {
		return []store.EnqueueResult{}, err
	}
	return s.enqueueCopying(func(copyEvents string) ([]store.EnqueueResult, error) {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			return nil, fmt.Errorf("pgstore: enqueue: %w", err)
		}
		defer conn.Release() // a connection left in a transaction is closed, not reused
		// This process's workers are woken here, without the LISTEN
		// hand-off; the notifications' copies are recognised by pid,
		// expected before the COMMIT is sent (with the last COPY, or
		// by commit).
		pid := conn.Conn().PgConn().PID()
		tx := &pipeTx{conn: conn.Conn(), onCommit: func(queues []string) { s.expectWakes(pid, queues) }}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op once committed
		res, err := enqueue(ctx, tx, tasks, opts, copyEvents)
		if err == nil {
			if err = tx.Commit(ctx); err != nil {
				err = fmt.Errorf("pgstore: enqueue: commit: %w", err)
			}
		}
		if err != nil || tx.wakeLost {
			s.dropWakes(pid, tx.expected) // no notification will come
		}
		if err != nil {
			return nil, err
		}
		s.wakeLocal(tx.woken)
		return res, nil
	})
}

// EnqueueTx implements store.Store for a pgx.Tx or a *sql.Tx (from
// github.com/jackc/pgx/v5/stdlib or any PostgreSQL database/sql driver). It
// works inside a savepoint, so a failed enqueue leaves the caller's
// transaction usable and without a trace of it; the caller commits.
func (s *Store) EnqueueTx(ctx context.Context, tx any, tasks []*bt.Task, opts store.EnqueueOpts) ([]store.EnqueueResult, error) {
	if err := checkEnqueue(tasks, opts); err != nil || len(tasks) == 0 {
		return []store.EnqueueResult{}, err
	}
	db, err := asDBTx(tx)
	if err != nil {
		return nil, err
	}
	return s.enqueueCopying(func(copyEvents string) ([]store.EnqueueResult, error) {
		return enqueueInSavepoint(ctx, db, tasks, opts, copyEvents)
	})
}

// enqueueInSavepoint is enqueue inside a savepoint of db, rolled back when
// it fails.
func enqueueInSavepoint(ctx context.Context, db dbtx, tasks []*bt.Task, opts store.EnqueueOpts, copyEvents string) ([]store.EnqueueResult, error) {
	release, rollback, err := db.savepoint(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: enqueue: savepoint: %w", err)
	}
	res, err := enqueue(ctx, db, tasks, opts, copyEvents)
	if err != nil {
		if rbErr := rollback(context.WithoutCancel(ctx)); rbErr != nil {
			return nil, errors.Join(err, fmt.Errorf("pgstore: enqueue: rollback to savepoint: %w", rbErr))
		}
		return nil, err
	}
	if err := release(ctx); err != nil {
		return nil, fmt.Errorf("pgstore: enqueue: release savepoint: %w", err)
	}
	return res, nil
}

func checkEnqueue(tasks []*bt.Task, opts store.EnqueueOpts) error {
	for i, t := range tasks {
		if t == nil {
			return fmt.Errorf("pgstore: enqueue: task %d is nil", i)
		}
		if t.MergeKey != "" && opts.Merge == nil {
			return fmt.Errorf("pgstore: enqueue: task %s has a merge key but EnqueueOpts.Merge is nil", t.ID)
		}
	}
	return nil
}

// row is a task as an enqueue writes it.
type row struct {
	task       *bt.Task
	inline     []byte // nil when spilled
	spilled    bool
	attributes []byte
	retry      []byte
}

func newRow(t *bt.Task, inlineLimit int) (row, error) {
	r := row{task: t, inline: []byte(t.Payload)}
	if inlineLimit > 0 && len(t.Payload) > inlineLimit {
		r.inline, r.spilled = nil, true
	}
	var err error
	if len(t.Attributes) > 0 { // empty attributes are stored as NULL and read back as nil
		if r.attributes, err = json.Marshal(t.Attributes); err != nil {
			return r, fmt.Errorf("pgstore: enqueue %s: attributes: %w", t.ID, err)
		}
	}
	if t.Retry != nil {
		if r.retry, err = json.Marshal(t.Retry); err != nil {
			return r, fmt.Errorf("pgstore: enqueue %s: retry policy: %w", t.ID, err)
		}
	}
	return r, nil
}

// args appends the row's values in insertColumns order.
func (r row) args(args []any) []any {
	t := r.task
	return append(args,
		t.ID, t.Queue, t.Kind, string(t.State), t.Priority, t.Attempt, t.MaxAttempts,
		nullJSON(r.inline), len(t.Payload), r.spilled, nullJSON(r.attributes),
		t.RunAt, t.CreatedAt, t.UpdatedAt,
		time.Duration(t.Timeout).Microseconds(), nullTime(t.Deadline), nullJSON(r.retry),
		nullString(t.IdempotencyKey), nullString(t.MergeKey),
		t.Progress.Total, t.Progress.Completed, t.Complexity,
		nullString(t.TraceParent), nullString(t.ReplayedFrom),
	)
}

// stored is the task as the row now holds it, as Get would read it back.
func (r row) stored() *bt.Task {
	st := new(bt.Task)
	r.storeInto(st, bytes.Clone(r.task.Payload))
	return st
}

// storedBatch is stored of each row of batch, the tasks allocated
// together and their payloads copied into one array (each its own part
// of it, its capacity its length, so an append to one cannot write
// into the next): two allocations a batch instead of two a task.
func storedBatch(batch []row) []*bt.Task {
	size := 0
	for _, r := range batch {
		size += len(r.task.Payload)
	}
	payloads := make([]byte, 0, size)
	block := make([]bt.Task, len(batch))
	out := make([]*bt.Task, len(batch))
	for i, r := range batch {
		var p []byte // nil stays nil, as bytes.Clone keeps it
		switch src := r.task.Payload; {
		case len(src) > 0:
			start := len(payloads)
			payloads = append(payloads, src...)
			p = payloads[start:len(payloads):len(payloads)]
		case src != nil:
			p = []byte{}
		}
		r.storeInto(&block[i], p)
		out[i] = &block[i]
	}
	return out
}

// storeInto sets *st to the task as the row now holds it, with payload,
// a copy of its payload.
func (r row) storeInto(st *bt.Task, payload []byte) {
	t := r.task
	*st = bt.Task{
		ID: t.ID, Queue: t.Queue, Kind: t.Kind, State: t.State,
		Attempt: t.Attempt, MaxAttempts: t.MaxAttempts,
		Payload:  payload,
		Priority: t.Priority,
		RunAt:    utc(t.RunAt), CreatedAt: utc(t.CreatedAt), UpdatedAt: utc(t.UpdatedAt),
		Progress:       t.Progress,
		Timeout:        bt.Duration(time.Duration(t.Timeout).Truncate(time.Microsecond)),
		Deadline:       utcPtr(t.Deadline),
		UniqueUntil:    utcPtr(t.UniqueUntil),
		IdempotencyKey: t.IdempotencyKey,
		MergeKey:       t.MergeKey,
		Complexity:     t.Complexity,
		TraceParent:    t.TraceParent,
		PayloadSize:    len(t.Payload),
		PayloadSpilled: r.spilled,
		ReplayedFrom:   t.ReplayedFrom,
	}
	if len(t.Attributes) > 0 {
		st.Attributes = maps.Clone(t.Attributes)
	}
	if r.retry != nil {
		st.Retry = new(bt.RetryPolicy)
		_ = json.Unmarshal(r.retry, st.Retry) // we just marshalled it
	}
}

// enqueue is Enqueue's body, written once for pgx and database/sql. Tasks
// without keys are inserted in bulk (COPY on pgx: copy.go); tasks with an
// idempotency or merge key one by one, in input order, since each may meet
// an earlier one, except on pgx a batch's tasks keyed by an idempotency key
// alone, which are resolved together with the same outcome
// (idempotent.go).
// copyEvents, when not empty, lets a large batch of tasks without keys be
// written by COPY, its event and counts by that statement (copy.go:
// sqlCopiedEvents in the form for the store's schema).
func enqueue(ctx context.Context, db dbtx, tasks []*bt.Task, opts store.EnqueueOpts, copyEvents string) ([]store.EnqueueResult, error) {
	results := make([]store.EnqueueResult, len(tasks))
	actor := store.ActorFrom(ctx, store.DefaultActor)
	var folded []bt.Event // task.enqueued of merges and duplicates
	var plain, keyed []int
	for i, t := range tasks {
		if t.IdempotencyKey == "" && t.MergeKey == "" {
			plain = append(plain, i)
		} else {
			keyed = append(keyed, i)
		}
	}

	var woken []string // queues that got a pending task, once each
	wake := func(t *bt.Task) {
		if t.State == bt.StatePending && !slices.Contains(woken, t.Queue) {
			woken = append(woken, t.Queue)
		}
	}

	var spills []row
	for start := 0; start < len(plain); start += maxInsertRows {
		chunk := plain[start:min(start+maxInsertRows, len(plain))]
		batch := make([]row, len(chunk))
		for j, i := range chunk {
			r, err := newRow(tasks[i], opts.InlineLimit)
			if err != nil {
				return nil, err
			}
			batch[j] = r
		}
		copied := false
		if copyEvents != "" && worthCopying(len(chunk)) {
			var err error
			if copied, err = copyTasks(ctx, db, batch, actor, copyEvents, copiedLast(tasks, batch, opts)); err != nil { // copy.go
				return nil, err
			}
		}
		if !copied {
			if err := insertBatch(ctx, db, batch, actor); err != nil {
				return nil, err
			}
		}
		stored := storedBatch(batch)
		for j, i := range chunk {
			results[i] = store.EnqueueResult{Task: stored[j]}
			wake(tasks[i])
			if batch[j].spilled {
				spills = append(spills, batch[j])
			}
		}
	}
	if err := insertPayloads(ctx, db, spills); err != nil {
		return nil, err
	}

	batched := make(map[int]bool)
	if _, ok := db.(copier); ok { // arrays: pgx
		if idx := batchIdempotent(tasks, keyed); idx != nil {
			spilled, err := enqueueIdempotent(ctx, db, tasks, idx, opts, actor, results) // idempotent.go
			if err != nil {
				return nil, err
			}
			if err := insertPayloads(ctx, db, spilled); err != nil {
				return nil, err
			}
			for _, i := range idx {
				batched[i] = true
			}
		}
	}
	for _, i := range keyed {
		d := opts.DebounceOf(i)
		if !batched[i] {
			res, err := enqueueKeyed(ctx, db, tasks[i], opts, d, actor)
			if err != nil {
				return nil, err
			}
			results[i] = res
		}
		res := results[i]
		switch {
		case !res.Merged && !res.Duplicate:
			wake(tasks[i])
		case res.Merged && d.Debounced:
			wake(res.Task) // due at its max wait: pending
			folded = append(folded, store.DebouncedEvent(res.Task, tasks[i], actor))
		default:
			folded = append(folded, store.FoldedEvent(res.Task, tasks[i], res.Merged, actor))
		}
	}
	// The engine's own events about these tasks (task.too_complex), after
	// their task.enqueued.
	folded = append(folded, opts.Events...)
	if err := insertEventsScalar(ctx, db, folded); err != nil {
		return nil, err
	}
	if err := insertOrdering(ctx, db, tasks, results); err != nil { // ordering.go
		return nil, err
	}

	if p, ok := db.(*pipeTx); ok {
		p.wakeAtCommit(woken) // sent with its COMMIT
	} else if len(woken) > 0 {
		args := make([]any, len(woken))
		for i, q := range woken {
			args[i] = q
		}
		if err := db.exec(ctx, sqlNotify(len(woken)), db.batchArgs(len(woken), args)...); err != nil {
			return nil, fmt.Errorf("pgstore: enqueue: notify: %w", err)
		}
	}
	return results, nil
}

// maxKeyedTries bounds the retries of a keyed enqueue that keeps losing a
// race for its key to concurrent enqueues.
const maxKeyedTries = 10

// enqueueKeyed enqueues a task with an idempotency or merge key: it returns
// the live task holding the idempotency key, or merges into the waiting task
// holding the merge key, or inserts. A concurrent enqueue may take the key
// between the look-up and the insert; the insert then does nothing, and the
// look-up runs again and finds the winner.
func enqueueKeyed(ctx context.Context, db dbtx, t *bt.Task, opts store.EnqueueOpts, d store.Debounce, actor string) (store.EnqueueResult, error) {
	r, err := newRow(t, opts.InlineLimit)
	if err != nil {
		return store.EnqueueResult{}, err
	}
	if t.UniqueUntil != nil {
		if err := db.exec(ctx, sqlLockIdempotent, t.IdempotencyKey); err != nil {
			return store.EnqueueResult{}, fmt.Errorf("pgstore: enqueue %s: lock idempotency key: %w", t.ID, err)
		}
	}
	for range maxKeyedTries {
		if t.IdempotencyKey != "" {
			existing, err := queryTask(ctx, db, sqlFindIdempotent, t.IdempotencyKey, t.CreatedAt)
			if err != nil {
				return store.EnqueueResult{}, fmt.Errorf("pgstore: enqueue %s: idempotency key: %w", t.ID, err)
			}
			if existing != nil {
				return store.EnqueueResult{Task: existing, Duplicate: true}, nil
			}
		}
		if t.MergeKey != "" {
			existing, err := queryTask(ctx, db, sqlFindMergeable, t.Kind, t.MergeKey)
			if err != nil {
				return store.EnqueueResult{}, fmt.Errorf("pgstore: enqueue %s: merge key: %w", t.ID, err)
			}
			if existing != nil {
				merged, err := merge(ctx, db, existing, t, opts, d)
				if err != nil {
					return store.EnqueueResult{}, err
				}
				return store.EnqueueResult{Task: merged, Merged: true}, nil
			}
		}
		inserted, err := insertTasks(ctx, db, sqlInsertTasks(1, ""), append(r.args(nil), actor))
		if err != nil {
			return store.EnqueueResult{}, err
		}
		if inserted[t.ID] > 0 {
			// Inserted without its window, the row met the live tasks
			// holding the key without one; now it leaves their index.
			if t.UniqueUntil != nil {
				if err := db.exec(ctx, sqlSetUniqueUntil, t.ID, t.IdempotencyKey, *t.UniqueUntil); err != nil {
					return store.EnqueueResult{}, fmt.Errorf("pgstore: enqueue %s: unique until: %w", t.ID, err)
				}
			}
			if d.Debounced {
				if err := db.exec(ctx, sqlSetDebounce, t.ID, t.Kind, t.MergeKey, d.For.Microseconds(),
					nullTime(d.Until(t.CreatedAt))); err != nil {
					return store.EnqueueResult{}, fmt.Errorf("pgstore: enqueue %s: debounce: %w", t.ID, err)
				}
			}
			if r.spilled {
				if err := insertPayloads(ctx, db, []row{r}); err != nil {
					return store.EnqueueResult{}, err
				}
			}
			return store.EnqueueResult{Task: r.stored()}, nil
		}
		exists, err := idExists(ctx, db, t.ID)
		if err != nil {
			return store.EnqueueResult{}, err
		}
		if exists {
			return store.EnqueueResult{}, conflictErr(t.ID)
		}
	}
	return store.EnqueueResult{}, fmt.Errorf("pgstore: enqueue %s: its idempotency or merge key kept changing hands; try again: %w",
		t.ID, store.ErrConflict)
}

// merge folds the incoming task's payload into the waiting one (locked by
// the caller's look-up) and stores the result, inline or spilled; a
// debounced merge also moves the waiting task's run time.
func merge(ctx context.Context, db dbtx, existing, incoming *bt.Task, opts store.EnqueueOpts, d store.Debounce) (*bt.Task, error) {
	payload, err := opts.Merge(existing.Kind, existing.Payload, existing.MergeCount, incoming.Payload)
	if err != nil {
		return nil, fmt.Errorf("pgstore: enqueue %s: merge into %s: %w", incoming.ID, existing.ID, err)
	}
	spilled := opts.InlineLimit > 0 && len(payload) > opts.InlineLimit
	var inline []byte
	switch {
	case spilled:
		if err := db.exec(ctx, sqlInsertPayloads(1), existing.ID, []byte(payload)); err != nil {
			return nil, fmt.Errorf("pgstore: enqueue %s: spill merged payload: %w", incoming.ID, err)
		}
	case existing.PayloadSpilled:
		inline = []byte(payload)
		if err := db.exec(ctx, sqlDeletePayload, existing.ID); err != nil {
			return nil, fmt.Errorf("pgstore: enqueue %s: unspill merged payload: %w", incoming.ID, err)
		}
	default:
		inline = []byte(payload)
	}
	q, args := sqlMerge, []any{existing.ID, nullJSON(inline), len(payload), spilled, incoming.UpdatedAt}
	if d.Debounced {
		q, args = sqlMergeDebounced, append(args, d.DebouncedRunAt(existing, incoming), d.For.Microseconds(),
			nullTime(d.Until(existing.CreatedAt)), existing.Kind, existing.MergeKey)
	}
	merged, err := queryTask(ctx, db, q, args...)
	if err != nil {
		return nil, fmt.Errorf("pgstore: enqueue %s: merge into %s: %w", incoming.ID, existing.ID, err)
	}
	if merged == nil {
		return nil, fmt.Errorf("pgstore: enqueue %s: merge target %s vanished", incoming.ID, existing.ID)
	}
	return merged, nil
}

// insertBatch writes tasks without keys by one multi-row INSERT, with
// their task.enqueued event; an id that exists, or is twice in the batch,
// is a conflict.
func insertBatch(ctx context.Context, db dbtx, batch []row, actor string) error {
	args := make([]any, 0, len(batch)*len(insertColumns)+1)
	for _, r := range batch {
		args = r.args(args)
	}
	args = append(args, actor)
	inserted, err := insertTasks(ctx, db, sqlInsertTasks(len(batch), "(id)"), db.batchArgs(len(batch), args))
	if err != nil {
		return err
	}
	return checkInserted(batch, inserted)
}

// checkInserted: every task of batch was inserted (inserted: the ids the
// insert returned, counted); an id that exists, or is twice in the batch,
// is a conflict.
func checkInserted(batch []row, inserted map[string]int) error {
	for _, r := range batch {
		id := r.task.ID
		if inserted[id] == 0 {
			return conflictErr(id)
		}
		inserted[id]-- // the same id twice in one batch conflicts too
	}
	return nil
}

// insertTasks runs an insert and counts the ids it returned.
func insertTasks(ctx context.Context, db dbtx, sql string, args []any) (map[string]int, error) {
	rs, err := db.query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("pgstore: enqueue: insert: %w", err)
	}
	return countIDs(rs)
}

// countIDs reads the ids an insert returned, counted, and closes rs.
func countIDs(rs rows) (map[string]int, error) {
	defer rs.Close()
	inserted := make(map[string]int)
	for rs.Next() {
		var id string
		if err := rs.Scan(&id); err != nil {
			return nil, fmt.Errorf("pgstore: enqueue: insert: %w", err)
		}
		inserted[id]++
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: enqueue: insert: %w", err)
	}
	return inserted, nil
}

func insertPayloads(ctx context.Context, db dbtx, spills []row) error {
	const perRow = 2
	for start := 0; start < len(spills); start += maxInsertRows {
		chunk := spills[start:min(start+maxInsertRows, len(spills))]
		args := make([]any, 0, len(chunk)*perRow)
		for _, r := range chunk {
			args = append(args, r.task.ID, []byte(r.task.Payload))
		}
		if err := db.exec(ctx, sqlInsertPayloads(len(chunk)), db.batchArgs(len(chunk), args)...); err != nil {
			return fmt.Errorf("pgstore: enqueue: spill payloads: %w", err)
		}
	}
	return nil
}

// queryTask reads at most one task; nil when there is none.
func queryTask(ctx context.Context, db dbtx, sql string, args ...any) (*bt.Task, error) {
	rs, err := db.query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var t *bt.Task
	if rs.Next() {
		if t, err = scanTask(rs); err != nil {
			return nil, err
		}
	}
	return t, rs.Err()
}

func idExists(ctx context.Context, db dbtx, id string) (bool, error) {
	rs, err := db.query(ctx, sqlIDExists, id)
	if err != nil {
		return false, fmt.Errorf("pgstore: enqueue %s: %w", id, err)
	}
	defer rs.Close()
	var n int64
	for rs.Next() {
		if err := rs.Scan(&n); err != nil {
			return false, err
		}
	}
	return n > 0, rs.Err()
}

func conflictErr(id string) error {
	return fmt.Errorf("pgstore: task %s already exists: %w", id, store.ErrConflict)
}
