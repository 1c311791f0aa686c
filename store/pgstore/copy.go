package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// A batch of tasks without keys is written by COPY when the transaction is
// pgx's and the batch is larger than a prepared INSERT's (maxPreparedRows):
// a multi-row INSERT of a thousand tasks is a statement of 24,000
// parameters that the server parses and plans on every batch, which cost
// far more than writing the rows (docs/benchmarks.md, "Batch enqueue by
// COPY"). Its task.enqueued row is written first (sqlCopiedEvents), so
// that the copied rows can list its number in event_links; the events and
// the rows are the INSERT's, read back alike.
//
// COPY has no ON CONFLICT: a task id that exists, or is twice in the
// batch, fails the COPY and with it the transaction (or the savepoint).
// The caller then runs the whole enqueue again with INSERTs
// (errCopyConflict), which report the id as they always have, so a
// conflict costs a second attempt and nothing else changes.

// errCopyConflict is a COPY that met a task id already taken. The
// transaction (or savepoint) it ran in is aborted.
var errCopyConflict = errors.New("pgstore: enqueue: a copied task id is taken")

// copyColumns are the columns a COPY writes: insertColumns, then
// event_links.
var copyColumns = append(append([]string(nil), insertColumns...), "event_links")

// worthCopying says whether a batch of plain (unkeyed) tasks is written
// by COPY.
func worthCopying(plain int) bool { return plain > maxPreparedRows }

// copyTasks writes batch by COPY with its task.enqueued event and its
// counts, written by events (sqlCopiedEvents or its form for an older
// schema); ok is false when the transaction cannot COPY (database/sql),
// and nothing was written.
//
// last says that the batch is all the enqueue writes (copiedLast): in
// Store.Enqueue's own transaction (pipeTx) its COPY then carries the
// COMMIT, and its wake-up goes with the event row.
func copyTasks(ctx context.Context, db dbtx, batch []row, actor, events string, last bool) (ok bool, err error) {
	cp, ok := db.(copier)
	if !ok {
		return false, nil
	}
	var seq int64
	ev := copiedEvents(batch)
	args := []any{ev.time, ev.times, ev.subjects, ev.queues, ev.kinds, ev.attributes, actor, ev.bodies, ev.common}
	if events == sqlCopiedEvents { // the older forms count nothing
		queues, states, ns := copiedCounts(batch)
		args = append(args, queues, states, ns)
	}
	p, commits := db.(*pipeTx)
	commits = commits && last && p.commitsAtCopy()
	if commits {
		err = p.firstWaking(ctx, pendingQueues(batch), &seq, events, args...)
	} else {
		err = cp.queryRow(ctx, events, args...).Scan(&seq)
	}
	if err != nil {
		return false, fmt.Errorf("pgstore: enqueue: events: %w", err)
	}
	data, err := copyRows(getCopyBuffer(), batch, seq) // copyrow.go
	if err != nil {
		return false, fmt.Errorf("pgstore: enqueue: copy: %w", err)
	}
	if commits {
		err = p.copyCommit(ctx, data)
	} else {
		err = cp.copyFrom(ctx, data)
	}
	if err == nil {
		putCopyBuffer(data)
	}
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "backstop_tasks_pkey" {
			return false, fmt.Errorf("%w: %s", errCopyConflict, pe.Detail)
		}
		return false, fmt.Errorf("pgstore: enqueue: copy: %w", err)
	}
	return true, nil
}

// copiedLast says whether batch, a copied chunk of tasks, is all that the
// enqueue of tasks writes: every task is in it (none keyed, one chunk),
// none spills its payload or takes an ordering row, and no engine event
// follows.
func copiedLast(tasks []*bt.Task, batch []row, opts store.EnqueueOpts) bool {
	if len(batch) != len(tasks) || len(opts.Events) > 0 {
		return false
	}
	for _, r := range batch {
		if r.spilled || r.task.OrderingKey != "" {
			return false
		}
	}
	return true
}

// pendingQueues is the queues of batch's pending tasks, once each, in
// their first task's order: the queues its enqueue wakes.
func pendingQueues(batch []row) []string {
	var queues []string
	for _, r := range batch {
		if r.task.State == bt.StatePending && !slices.Contains(queues, r.task.Queue) {
			queues = append(queues, r.task.Queue)
		}
	}
	return queues
}

// sqlCopiedEvents writes the task.enqueued row of a batch written by COPY,
// before its tasks, and returns its number, which the copied rows then
// list in event_links. Its elements are built by copiedEvents: $1 the
// newest creation time, $2 the creation times, $3 the ids, $4 the queues,
// $5 the kinds, $6 the attributes and $8 the bodies as JSON arrays, $7 the
// actor, $9 the common body.
//
// It also counts the batch (copiedCounts: $10 the queues, $11 the states,
// $12 the tasks of each pair; a copied task has no dead-letter status and
// no dead-letter group) into the count deltas, and marks the transaction
// counted for an INSERT: the insert trigger that the COPY, the next
// statement, fires finds the mark, clears it and appends nothing
// (migration 00060), and the dead letters' groups trigger, which an
// INSERT so marked gives nothing to count, returns at once (migration
// 00063). Nothing runs between the two statements; a COPY that fails
// takes the deltas and the mark with its transaction or savepoint. Before
// the mark (countedVersion) the trigger counts the COPY: the form without
// the count, which takes $1 to $9 only.
var sqlCopiedEvents = withOlderForms(`WITH counted AS (
	INSERT INTO backstop_task_count_deltas (queue, state, dlq_status, n)
	SELECT queue, state, '', n FROM unnest($10::text[], $11::text[], $12::bigint[]) c(queue, state, n)
	WHERE set_config('backstop.counted', 'INSERT', true) <> ''
)
`+copiedEventsSQL, olderForm{countedVersion, copiedEventsSQL})

const copiedEventsSQL = `INSERT INTO backstop_events (seq, link, type, time, times, subjects, queues, kinds, attributes, actor, bodies, common)
SELECT s.seq, s.seq, 'task.enqueued', $1::timestamptz, $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::json, $7::text, $8::json, $9::json
FROM (SELECT ` + evSeq + ` AS seq) s
RETURNING seq`

// copiedCounts is a copied batch's tasks by queue and state, as
// sqlCopiedEvents takes them: the pairs in their first task's order and
// each pair's number of tasks.
func copiedCounts(batch []row) (queues, states []string, ns []int64) {
	at := make(map[[2]string]int, 4)
	for _, r := range batch {
		k := [2]string{r.task.Queue, string(r.task.State)}
		i, ok := at[k]
		if !ok {
			i = len(ns)
			at[k] = i
			queues, states, ns = append(queues, k[0]), append(states, k[1]), append(ns, 0)
		}
		ns[i]++
	}
	return queues, states, ns
}

// enqueuedEventRow is the elements of a batch's task.enqueued row.
type enqueuedEventRow struct {
	time                       time.Time
	times                      eventTimes
	subjects, queues, kinds    eventTexts
	attributes, bodies, common []byte
}

// eventTexts and eventTimes are one array of a copied batch's
// task.enqueued row, read from the batch's tasks in place: pgx's array
// codec takes them as pgtype.ArrayGetters whose elements are pointers
// (taskText, taskCreated). A []string or []time.Time would box every
// element into an interface as pgx encodes it, an allocation each: five
// thousand a batch of 1,000 (docs/benchmarks.md, branch enqclient). The
// bytes sent are the same.
type eventTexts struct {
	batch []row
	field func(*bt.Task) *string
}

type eventTimes []row

func (a eventTexts) Dimensions() []pgtype.ArrayDimension { return dimensions(len(a.batch)) }
func (a eventTexts) Index(i int) any                     { return (*taskText)(a.field(a.batch[i].task)) }
func (a eventTexts) IndexType() any                      { return (*taskText)(nil) }

func (a eventTimes) Dimensions() []pgtype.ArrayDimension { return dimensions(len(a)) }
func (a eventTimes) Index(i int) any                     { return (*taskCreated)(a[i].task) }
func (a eventTimes) IndexType() any                      { return (*taskCreated)(nil) }

// String is the array as fmt prints a slice of its elements, for a
// tracer that logs a statement's arguments.
func (a eventTexts) String() string { return fmt.Sprint(ids(a)) }
func (a eventTimes) String() string { return fmt.Sprint(createdTimes(a)) }

func ids(a eventTexts) []string {
	out := make([]string, len(a.batch))
	for i, r := range a.batch {
		out[i] = *a.field(r.task)
	}
	return out
}

func createdTimes(a eventTimes) []time.Time {
	out := make([]time.Time, len(a))
	for i, r := range a {
		out[i] = r.task.CreatedAt
	}
	return out
}

func dimensions(n int) []pgtype.ArrayDimension {
	return []pgtype.ArrayDimension{{Length: int32(n), LowerBound: 1}}
}

// taskText is a task's text field, as a pgtype.TextValuer.
type taskText string

func (s *taskText) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*s), Valid: true}, nil
}

// taskCreated is a task's creation time, as a pgtype.TimestamptzValuer.
type taskCreated bt.Task

func (t *taskCreated) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: t.CreatedAt, Valid: true}, nil
}

func taskID(t *bt.Task) *string    { return &t.ID }
func taskQueue(t *bt.Task) *string { return &t.Queue }
func taskKind(t *bt.Task) *string  { return &t.Kind }

// enqueuedFields is the number of fields of a task.enqueued body.
const enqueuedFields = 6

// enqueuedBody appends fields [from, to) of a copied task's task.enqueued
// body as a JSON object, each field a `"name":value`, in the order the
// INSERT's json_build_object writes them.
func enqueuedBody(buf []byte, t *bt.Task, from, to int) []byte {
	buf = append(buf, '{')
	for f := from; f < to; f++ {
		if f > from {
			buf = append(buf, ',')
		}
		switch f {
		case 0:
			buf = append(buf, `"merged":false`...)
		case 1:
			buf = append(buf, `"duplicate":false`...)
		case 2:
			buf = append(buf, `"state":`...)
			buf = strconv.AppendQuote(buf, string(t.State)) // a lower-case word: its JSON string
		case 3:
			buf = append(buf, `"run_at":"`...)
			buf = t.RunAt.UTC().AppendFormat(buf, "2006-01-02T15:04:05.000000Z")
			buf = append(buf, '"')
		case 4:
			buf = append(buf, `"priority":`...)
			buf = strconv.AppendInt(buf, int64(t.Priority), 10)
		case 5:
			buf = append(buf, `"max_attempts":`...)
			buf = strconv.AppendInt(buf, int64(t.MaxAttempts), 10)
		}
	}
	return append(buf, '}')
}

// sameFields is how many leading fields of a's and b's task.enqueued
// bodies are equal (enqueuedBody writes run_at to the microsecond).
func sameFields(a, b *bt.Task) int {
	switch {
	case a.State != b.State:
		return 2
	case a.RunAt.UnixMicro() != b.RunAt.UnixMicro():
		return 3
	case a.Priority != b.Priority:
		return 4
	case a.MaxAttempts != b.MaxAttempts:
		return 5
	}
	return enqueuedFields
}

// copiedEvents builds the task.enqueued row of a batch in Go, element for
// element what enqueuedEvents writes from the inserted rows (bodies with
// the same fields in the same order, times as evTime formats them:
// microseconds, as the rows store them; readers parse attributes and
// compact bodies, so spacing does not show). The leading fields whose
// values every task of the batch shares (at least merged and duplicate;
// for a batch of EnqueueMany usually all of them) are written once, in the
// row's common body, which readers put first in each element's body
// (evBody): a body a task instead of a hundred bytes a task. The shared
// fields are found from the tasks' values, so only the bodies' other
// fields are formatted.
func copiedEvents(batch []row) enqueuedEventRow {
	n := len(batch)
	ev := enqueuedEventRow{times: eventTimes(batch), subjects: eventTexts{batch, taskID},
		queues: eventTexts{batch, taskQueue}, kinds: eventTexts{batch, taskKind}}
	attrs := make([]byte, 0, 2+6*n)
	attrs = append(attrs, '[')
	shared := enqueuedFields // the leading fields equal in every body
	for i, r := range batch {
		t := r.task
		if t.CreatedAt.After(ev.time) {
			ev.time = t.CreatedAt
		}
		if i > 0 {
			attrs = append(attrs, ',', ' ')
		}
		if r.attributes == nil {
			attrs = append(attrs, "null"...)
		} else {
			attrs = append(attrs, r.attributes...)
		}
		shared = min(shared, sameFields(batch[0].task, t))
	}
	ev.attributes = append(attrs, ']')
	ev.common = enqueuedBody(nil, batch[0].task, 0, shared)
	each := 4
	if shared < enqueuedFields {
		each = 128
	}
	bodies := make([]byte, 0, 2+n*each)
	bodies = append(bodies, '[')
	for i, r := range batch {
		if i > 0 {
			bodies = append(bodies, ',', ' ')
		}
		bodies = enqueuedBody(bodies, r.task, shared, enqueuedFields)
	}
	ev.bodies = append(bodies, ']')
	return ev
}

// copier is a transaction that can COPY and takes arrays as parameters:
// pgx's (not database/sql's, whose drivers differ on arrays).
type copier interface {
	queryRow(ctx context.Context, sql string, args ...any) pgx.Row
	// copyFrom sends data, a binary COPY stream of backstop_tasks' rows
	// (copyRows), as sqlCopyTasks.
	copyFrom(ctx context.Context, data []byte) error
}

func (t pgxTx) queryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.tx.QueryRow(ctx, sql, args...)
}

func (t pgxTx) copyFrom(ctx context.Context, data []byte) error {
	return copyStream(ctx, t.tx.Conn(), data)
}

// copyStream sends data as sqlCopyTasks on conn, reported to the
// connection's tracer as pgx reports its own CopyFrom.
func copyStream(ctx context.Context, conn *pgx.Conn, data []byte) error {
	_, err := copyStreamAs(ctx, conn, sqlCopyTasks, data)
	return err
}

// copyStreamAs sends data as sql, the COPY alone or with the statements
// that follow it in the same query, and returns the last one's tag.
func copyStreamAs(ctx context.Context, conn *pgx.Conn, sql string, data []byte) (pgconn.CommandTag, error) {
	tr, _ := conn.Config().Tracer.(pgx.CopyFromTracer)
	if tr != nil {
		ctx = tr.TraceCopyFromStart(ctx, conn, pgx.TraceCopyFromStartData{TableName: pgx.Identifier{"backstop_tasks"}, ColumnNames: copyColumns})
	}
	tag, err := conn.PgConn().CopyFrom(ctx, bytes.NewReader(data), sql)
	if tr != nil {
		tr.TraceCopyFromEnd(ctx, conn, pgx.TraceCopyFromEndData{CommandTag: tag, Err: err})
	}
	return tag, err
}

// enqueueCopying runs body with the COPY's event statement for s's schema,
// and when its COPY met a taken id, runs it again without COPY (""): the
// INSERTs report the id. body runs in a transaction or savepoint of its
// own each time.
func (s *Store) enqueueCopying(body func(copyEvents string) ([]store.EnqueueResult, error)) ([]store.EnqueueResult, error) {
	res, err := body(s.hot(sqlCopiedEvents))
	if errors.Is(err, errCopyConflict) {
		return body("")
	}
	return res, err
}
