package pgstore

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	bt "github.com/backstophq/backstop/backstoptype"
)

// scanner is a row of pgx or database/sql.
type scanner interface {
	Scan(dest ...any) error
}

// scanTask reads one row of taskCols. Its destinations are types both pgx
// and database/sql scan into, so enqueue can share it across drivers.
//
// It is on the claim path (one call per claimed task), so it allocates
// little: the destinations live in a pooled taskScan whose pointers are
// made once, the task and its optional times in one taskBox, and the
// text columns that repeat from row to row (queue, kind, state, worker
// id, ...) are interned (textInterner) instead of copied every time, and
// the two ids (the task's, its execution's) are one string.
func scanTask(r scanner) (*bt.Task, error) {
	sc := taskScans.Get().(*taskScan)
	defer sc.release()
	if err := r.Scan(sc.dest[:]...); err != nil {
		return nil, err
	}
	// One allocation for both ids.
	sc.ids = append(append(sc.ids[:0], sc.id...), sc.executionID...)
	ids := string(sc.ids)
	box := &taskBox{}
	t := &box.t
	t.ID, t.ExecutionID = ids[:len(sc.id)], ids[len(sc.id):]
	t.Queue, t.Kind, t.State = sc.queue, sc.kind, bt.State(sc.state)
	t.Priority, t.Attempt, t.MaxAttempts = sc.priority, sc.attempt, sc.maxAttempts
	t.PayloadSize, t.PayloadSpilled, t.MergeCount = sc.payloadSize, sc.payloadSpilled, sc.mergeCount
	t.Progress.Total, t.Progress.Completed, t.Complexity = sc.progressTotal, sc.progressCompleted, sc.complexity
	t.DeadCount, t.ReplayCount = sc.deadCount, sc.replayCount
	if t.PayloadSpilled {
		t.Payload = sc.spilled
	} else {
		t.Payload = sc.inline
	}
	if sc.attributes != nil {
		if err := json.Unmarshal(sc.attributes, &t.Attributes); err != nil {
			return nil, fmt.Errorf("task %s: attributes: %w", t.ID, err)
		}
	}
	if sc.retry != nil {
		t.Retry = new(bt.RetryPolicy)
		if err := json.Unmarshal(sc.retry, t.Retry); err != nil {
			return nil, fmt.Errorf("task %s: retry policy: %w", t.ID, err)
		}
	}
	t.RunAt, t.CreatedAt, t.UpdatedAt = utc(sc.runAt), utc(sc.createdAt), utc(sc.updatedAt)
	t.Timeout = bt.Duration(time.Duration(sc.timeoutUS) * time.Microsecond)
	times := [...]struct {
		src *pgtype.Timestamptz
		dst **time.Time
	}{
		{&sc.deadline, &t.Deadline}, {&sc.attemptedAt, &t.AttemptedAt}, {&sc.leaseExpiresAt, &t.LeaseExpiresAt},
		{&sc.cancelRequestedAt, &t.CancelRequestedAt}, {&sc.finalizedAt, &t.FinalizedAt},
		{&sc.firstSeen, &t.FirstSeen}, {&sc.lastSeen, &t.LastSeen}, {&sc.uniqueUntil, &t.UniqueUntil},
	}
	for i, tm := range times {
		if !tm.src.Valid {
			continue
		}
		if tm.src.InfinityModifier != pgtype.Finite {
			return nil, fmt.Errorf("task %s: column %s is %s, want a finite time", t.ID, taskTimeColumns[i], tm.src.InfinityModifier)
		}
		box.times[i] = utc(tm.src.Time)
		*tm.dst = &box.times[i]
	}
	t.IdempotencyKey, t.MergeKey, t.TraceParent, t.LastError = sc.idemKey, sc.mergeKey, sc.traceParent, sc.lastError
	t.WorkerID = sc.workerID
	t.DeadReason, t.DLQStatus = bt.DeadReason(sc.deadReason), bt.DLQStatus(sc.dlqStatus)
	t.ReplayedFrom = sc.replayedFrom
	return t, nil
}

// taskTimeColumns names the nullable time columns in taskBox.times order.
var taskTimeColumns = [...]string{"deadline", "attempted_at", "lease_expires_at",
	"cancel_requested_at", "finalized_at", "first_seen", "last_seen", "unique_until"}

// taskBox is a scanned task with the values of its optional times (one
// allocation for both).
type taskBox struct {
	t     bt.Task
	times [len(taskTimeColumns)]time.Time
}

// taskScan holds the destinations of one row of taskCols; dest points at
// its fields, in column order.
type taskScan struct {
	id, executionID, ids                                            []byte // copied out by scanTask
	queue, kind, state                                              string
	idemKey, mergeKey, traceParent, lastError, workerID, deadReason string
	dlqStatus, replayedFrom                                         string
	priority, attempt, maxAttempts, payloadSize, mergeCount         int
	progressTotal, progressCompleted, deadCount, replayCount        int
	payloadSpilled                                                  bool
	complexity                                                      float64
	timeoutUS                                                       int64
	attributes, retry, inline, spilled                              []byte
	runAt, createdAt, updatedAt                                     time.Time
	deadline, attemptedAt, leaseExpiresAt, cancelRequestedAt        pgtype.Timestamptz
	finalizedAt, firstSeen, lastSeen, uniqueUntil                   pgtype.Timestamptz

	dest [taskScanColumns]any
}

// taskScanColumns is the number of columns taskCols selects: every task
// column (taskColumns), then the payload inline and spilled.
const taskScanColumns = 40

var taskScans = sync.Pool{New: func() any {
	sc := &taskScan{}
	// Text that repeats across rows is interned; ids are copied.
	sc.dest = [...]any{
		bytesDest{&sc.id}, textDest{&sc.queue, &interned}, textDest{&sc.kind, &interned}, textDest{&sc.state, &interned},
		&sc.priority, &sc.attempt, &sc.maxAttempts,
		&sc.payloadSize, &sc.payloadSpilled, &sc.attributes, &sc.runAt, &sc.createdAt, &sc.updatedAt,
		&sc.timeoutUS, &sc.deadline, &sc.retry, textDest{&sc.idemKey, nil}, textDest{&sc.mergeKey, nil}, &sc.mergeCount,
		&sc.progressTotal, &sc.progressCompleted, &sc.complexity, textDest{&sc.traceParent, nil}, textDest{&sc.lastError, nil},
		textDest{&sc.workerID, &interned}, bytesDest{&sc.executionID}, &sc.attemptedAt, &sc.leaseExpiresAt,
		&sc.cancelRequestedAt, &sc.finalizedAt,
		textDest{&sc.deadReason, &interned}, &sc.firstSeen, &sc.lastSeen, &sc.deadCount, &sc.replayCount,
		textDest{&sc.dlqStatus, &interned}, textDest{&sc.replayedFrom, nil}, &sc.uniqueUntil,
		&sc.inline, &sc.spilled,
	}
	return sc
}}

// release returns sc to the pool without the byte slices it scanned (the
// task has them).
func (sc *taskScan) release() {
	sc.attributes, sc.retry, sc.inline, sc.spilled = nil, nil, nil, nil
	taskScans.Put(sc)
}

// textDest scans a text column into *s: NULL and ” both as "". With an
// interner, a value seen before is shared instead of copied. It is both a
// pgx BytesScanner (given the column's bytes without a copy) and a
// database/sql Scanner; one pointer wide, it goes into an interface
// without an allocation.
type textDest struct {
	s  *string
	in *textInterner
}

func (d textDest) ScanBytes(b []byte) error {
	switch {
	case len(b) == 0:
		*d.s = ""
	case d.in != nil:
		*d.s = d.in.get(b)
	default:
		*d.s = string(b)
	}
	return nil
}

func (d textDest) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*d.s = ""
	case string:
		*d.s = v
	case []byte:
		return d.ScanBytes(v)
	default:
		return fmt.Errorf("cannot scan %T into a text column", src)
	}
	return nil
}

// bytesDest scans a text column into *b, reusing its array: NULL and ”
// both as empty. Like textDest, a pgx BytesScanner and a database/sql
// Scanner.
type bytesDest struct{ b *[]byte }

func (d bytesDest) ScanBytes(b []byte) error {
	*d.b = append((*d.b)[:0], b...)
	return nil
}

func (d bytesDest) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*d.b = (*d.b)[:0]
	case string:
		*d.b = append((*d.b)[:0], v...)
	case []byte:
		*d.b = append((*d.b)[:0], v...)
	default:
		return fmt.Errorf("cannot scan %T into a text column", src)
	}
	return nil
}

// textInterner keeps recently seen strings in a small lock-free table
// indexed by hash, two slots a value (two-way): a hit in either returns
// the kept string; a miss copies the bytes and keeps that string in the
// second slot when the first holds another value, else in the first. Two
// values whose first slots collide (a run's random queue name and its
// worker id, say) then both stay kept instead of evicting each other on
// every row; one slot each made a claimed row cost two more allocations
// in such a run.
type textInterner struct {
	slots [256]atomic.Pointer[string]
}

func (in *textInterner) get(b []byte) string {
	if len(b) > 128 { // not a name
		return string(b)
	}
	h := uint32(2166136261) // FNV-1a
	for _, c := range b {
		h = (h ^ uint32(c)) * 16777619
	}
	first := &in.slots[h%uint32(len(in.slots))]
	p := first.Load()
	if p != nil && *p == string(b) {
		return *p
	}
	second := &in.slots[(h>>8)%uint32(len(in.slots))]
	if q := second.Load(); q != nil && *q == string(b) {
		return *q
	}
	s := string(b)
	if p == nil {
		first.Store(&s)
	} else {
		second.Store(&s)
	}
	return s
}

var interned textInterner

func scanExecution(r scanner) (bt.Execution, error) {
	var (
		e                  bt.Execution
		outcome            string
		finishedAt         *time.Time
		errText, errDetail *string
	)
	if err := r.Scan(&e.ExecutionID, &e.TaskID, &e.Attempt, &e.WorkerID, &e.StartedAt,
		&finishedAt, &outcome, &errText, &errDetail); err != nil {
		return e, err
	}
	e.StartedAt = utc(e.StartedAt)
	e.FinishedAt = utcPtr(finishedAt)
	e.Outcome = bt.Outcome(outcome)
	e.Error = str(errText)
	e.ErrorDetail = str(errDetail)
	return e, nil
}

// utc is how every time leaves the store: UTC, to the microsecond.
func utc(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := utc(*t)
	return &v
}

func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Helpers for parameters: empty and zero values are stored as NULL.

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return *t
}

// nullJSON passes JSON as text: pgx sends it unchanged, and so does every
// database/sql driver (some send []byte as bytea).
func nullJSON(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}
