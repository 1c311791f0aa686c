package sqlitestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// This file writes the event log (docs/events.md, "Storage and cost"): one
// row per statement and event type (migration 00009), its per-event values
// in JSON arrays built here, in Go, from what the statement making the
// change returned. One row instead of one per event is what keeps the log
// off the hot path's cost: a claim of 100 tasks inserts one row (a few
// overflow pages), not 100 rows with an index entry each.
//
// Rows get their seq explicitly, so that the hot path can record a row's
// seq in the task rows it updates anyway (backstop_tasks.event_seqs)
// instead of writing one (subject, seq) entry per event: its UPDATE
// computes nextEventSeq (the writer is alone: the next number is known
// inside its transaction), appends it to event_seqs, returns it, and the
// event row is inserted with that seq. Every other event gets its entry in
// backstop_event_subjects.

// nextEventSeq is the seq the next row of the log takes (an uncorrelated
// subquery: evaluated once per statement). AUTOINCREMENT never reuses a
// number: it is above every row there is and every row there was.
const nextEventSeq = `(SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'backstop_events'), 0),
	coalesce((SELECT max(seq) FROM backstop_events), 0)) + 1)`

// maxRowEvents bounds one row (a reader decodes a whole row to serve any
// event of it).
const maxRowEvents = 1000

// evRow is a log row being built. A row of several events stores a column
// whose values are all equal (queues, kinds, attributes) as that one value
// instead of an array (times and ids: NULL), and its bodies may share a
// common part (common, a JSON object merged into each body: the claim's
// worker and lease); readers expand both (events.go). Fewer bytes per event
// is less for SQLite to write twice (WAL, checkpoint), and a column is only
// built as an array once two of its values differ.
type evRow struct {
	typ, actor           string
	n                    int
	time                 int64
	queues, kinds, attrs lazyCol
	t0                   int64  // the first event's time
	times                []byte // nil while every event is at t0
	qq, kq               quoted
	subjects, bodies     []byte // JSON arrays without their closing bracket
	ids                  []byte // likewise, nil while every id is ""
	common               []byte // a JSON object, or nil
}

// lazyCol is one column of a row: its first value while all are equal,
// the JSON array of them from the first that differs.
type lazyCol struct {
	first, cur string // encoded JSON values
	arr        []byte // nil while all are equal
}

func (c *lazyCol) add(n int, v string) {
	switch {
	case n == 0:
		c.first = v
	case c.arr == nil && v == c.first:
	default:
		if c.arr == nil {
			c.arr = append(make([]byte, 0, (n+1)*(len(v)+1)+1), '[')
			for k := range n {
				if k > 0 {
					c.arr = append(c.arr, ',')
				}
				c.arr = append(c.arr, c.first...)
			}
		}
		c.arr = append(append(c.arr, ','), v...)
	}
}

// value is the column as stored: one value for all (several events, all
// equal), else an array.
func (c *lazyCol) value(n int) string {
	switch {
	case c.arr != nil:
		return string(append(c.arr, ']'))
	case n == 1:
		return "[" + c.first + "]"
	}
	return c.first
}

// newEvRow starts a row; size is how many events it will likely hold, body
// the likely bytes of each one's body (its buffers are sized for them).
func newEvRow(typ, actor string, size, body int) *evRow {
	return &evRow{typ: typ, actor: actor, subjects: make([]byte, 0, 40*size+2), bodies: make([]byte, 0, (body+1)*size+2)}
}

// quoted caches the JSON encoding of the last strings seen (a batch's
// queue and kind repeat).
type quoted struct{ s, q string }

func (c *quoted) of(s string) string {
	if c.q == "" || c.s != s {
		c.s, c.q = s, string(appendJSONString(nil, s))
	}
	return c.q
}

// next starts the row's next event; the caller then appends its body (a
// JSON object) to r.bodies. attrs is the task's attributes as stored (a
// JSON object, or "" for none); id "" makes the event's id its cursor.
func (r *evRow) next(subject, queue, kind string, at int64, id, attrs string) {
	sep := byte('[')
	if r.n > 0 {
		sep = ','
	}
	if attrs == "" {
		attrs = "null"
	}
	if r.n == 0 || at > r.time {
		r.time = at
	}
	r.queues.add(r.n, r.qq.of(queue))
	r.kinds.add(r.n, r.kq.of(kind))
	r.attrs.add(r.n, attrs)
	if r.n == 0 {
		r.t0 = at
	} else if r.times != nil || at != r.t0 {
		if r.times == nil {
			r.times = append(r.times, '[')
			for k := range r.n {
				if k > 0 {
					r.times = append(r.times, ',')
				}
				r.times = strconv.AppendInt(r.times, r.t0, 10)
			}
		}
		r.times = strconv.AppendInt(append(r.times, ','), at, 10)
	}
	if id != "" && r.ids == nil {
		r.ids = append(r.ids, '[')
		for k := range r.n {
			if k > 0 {
				r.ids = append(r.ids, ',')
			}
			r.ids = append(r.ids, `""`...)
		}
	}
	if r.ids != nil {
		if r.n > 0 {
			r.ids = append(r.ids, ',')
		}
		r.ids = appendJSONString(r.ids, id)
	}
	r.n++
	r.subjects = appendJSONString(append(r.subjects, sep), subject)
	r.bodies = append(r.bodies, sep)
}

// args are the row's values in evInsert's column order (after seq).
func (r *evRow) args() []any {
	// The buffers are not touched after this: strings over them, not copies.
	closed := func(b []byte) string { b = append(b, ']'); return unsafe.String(unsafe.SliceData(b), len(b)) }
	var ids, times any
	if r.ids != nil {
		ids = closed(r.ids)
	}
	if r.times != nil {
		times = closed(r.times)
	}
	bodies := closed(r.bodies)
	switch {
	case r.common == nil:
	case r.n == 1: // one event: its whole body, as in any one-event row
		bodies = "[" + string(mergeBody([]byte(bodies[1:len(bodies)-1]), r.common)) + "]"
	default:
		bodies = `{"common":` + string(r.common) + `,"each":` + bodies + `}`
	}
	return []any{r.typ, r.time, r.actor, closed(r.subjects), r.queues.value(r.n), r.kinds.value(r.n),
		times, ids, r.attrs.value(r.n), bodies}
}

// mergeBody is the JSON object with the members of each, then those of
// common.
func mergeBody(each, common []byte) []byte {
	e := bytes.TrimSpace(each)
	c := bytes.TrimSpace(common)
	if len(c) <= 2 {
		return e
	}
	if len(e) <= 2 || e[0] != '{' {
		return c
	}
	ei, ci := bytes.TrimSpace(e[1:len(e)-1]), c[1:len(c)-1]
	out := make([]byte, 0, len(ei)+len(ci)+3)
	out = append(append(out, '{'), ei...)
	if len(ei) > 0 {
		out = append(out, ',')
	}
	return append(append(out, ci...), '}')
}

const evInsert = `INSERT INTO backstop_events (seq, type, time, actor, subjects, queues, kinds, times, ids, attributes, bodies) VALUES `

// insertRows inserts built rows with the seqs first, first+1, … (empty
// rows are skipped and take no number). With index, every event also gets
// its (subject, seq) entry in backstop_event_subjects; without, the caller
// records the seqs in the task rows (event_seqs).
func insertRows(ctx context.Context, q querier, rows []*evRow, first int64, index bool) error {
	const per = 100
	seq := first
	for start := 0; start < len(rows); start += per {
		chunk := rows[start:min(start+per, len(rows))]
		var sb, ib strings.Builder
		sb.WriteString(evInsert)
		ib.WriteString(`INSERT OR IGNORE INTO backstop_event_subjects (subject, seq)
			SELECT j.value, v.column1 FROM (VALUES `)
		args := make([]any, 0, 11*len(chunk))
		var iargs []any
		for _, r := range chunk {
			if r.n == 0 {
				continue
			}
			if len(args) > 0 {
				sb.WriteByte(',')
				ib.WriteByte(',')
			}
			sb.WriteString("(?,?,?,?,?,?,?,?,?,?,?)")
			ib.WriteString("(?,?)")
			a := r.args()
			args = append(append(args, seq), a...)
			iargs = append(iargs, seq, a[3])
			seq++
		}
		if len(args) == 0 {
			continue
		}
		if _, err := q.ExecContext(ctx, sb.String(), args...); err != nil {
			return fmt.Errorf("sqlite: events: %w", err)
		}
		if !index {
			continue
		}
		ib.WriteString(`) AS v, json_each(v.column2) AS j WHERE j.value IS NOT NULL`)
		if _, err := q.ExecContext(ctx, ib.String(), iargs...); err != nil {
			return fmt.Errorf("sqlite: events: subjects: %w", err)
		}
	}
	return nil
}

// insertEvents writes events built in Go, in as few rows as keeps each
// subject's events in their order: an event joins the latest row of its
// type and actor unless an earlier event of its subject is in a later row
// (then it starts a new one). A settle batch of failures so writes three
// rows (started, failed, retry_scheduled), an enqueue batch one.
func insertEvents(ctx context.Context, q querier, events []bt.Event) error {
	return insertEventsIndexed(ctx, q, events, true)
}

// insertEventsIndexed is insertEvents; index false leaves the events out
// of backstop_event_subjects (the index of task subjects): a worker's
// events are not a task's history.
func insertEventsIndexed(ctx context.Context, q querier, events []bt.Event, index bool) error {
	if len(events) == 0 {
		return nil
	}
	type key struct{ typ, actor string }
	var rows []*evRow
	lastOfKey := map[key]int{}
	lastOfSubject := make(map[string]int, len(events))
	for _, e := range events {
		k := key{e.Type, e.Actor}
		p, seen := lastOfSubject[e.Subject]
		g, ok := lastOfKey[k]
		if !ok || seen && g < p || rows[g].n >= maxRowEvents {
			g = len(rows)
			rows = append(rows, newEvRow(e.Type, e.Actor, min(len(events), maxRowEvents), 72))
			lastOfKey[k] = g
		}
		lastOfSubject[e.Subject] = g
		var attrs string
		if len(e.Attributes) > 0 {
			b, err := json.Marshal(e.Attributes)
			if err != nil {
				return err
			}
			attrs = string(b)
		}
		r := rows[g]
		r.next(e.Subject, e.Queue, e.Kind, us(e.Time), e.ID, attrs)
		if len(e.Body) == 0 {
			r.bodies = append(r.bodies, "{}"...)
		} else {
			r.bodies = append(r.bodies, e.Body...)
		}
	}
	var seq int64
	if err := q.QueryRowContext(ctx, `SELECT `+nextEventSeq).Scan(&seq); err != nil {
		return fmt.Errorf("sqlite: events: next seq: %w", err)
	}
	return insertRows(ctx, q, rows, seq, index)
}

// enqueuedRow builds the task.enqueued row of new tasks (neither duplicate
// nor merged; attrs[i]: tasks[i]'s attributes as stored): the events
// store.EnqueuedEvent describes, with the cursor as id like the hot path's.
// When every body is the same (a batch of one queue, kind, run_at and
// options, the usual case), the row stores it once as the common part.
func enqueuedRow(tasks []*bt.Task, attrs []string, actor string) *evRow {
	r := newEvRow(store.EventEnqueued, actor, len(tasks), 2) // "{}" when the body is common
	var (
		runAt       time.Time
		runAtText   string
		body, first []byte
		differ      bool
	)
	for i, t := range tasks {
		r.next(t.ID, t.Queue, t.Kind, us(t.CreatedAt), "", attrs[i])
		if i == 0 || !t.RunAt.Equal(runAt) {
			runAt, runAtText = t.RunAt, store.EventTime(t.RunAt)
		}
		body = appendJSONString(append(body[:0], `{"merged":false,"duplicate":false,"state":`...), string(t.State))
		body = append(append(append(body, `,"run_at":"`...), runAtText...), `","priority":`...)
		body = strconv.AppendInt(body, int64(t.Priority), 10)
		body = strconv.AppendInt(append(body, `,"max_attempts":`...), int64(t.MaxAttempts), 10)
		body = append(body, '}')
		switch {
		case i == 0:
			first = append([]byte(nil), body...)
			r.bodies = append(r.bodies, "{}"...)
		case !differ && bytes.Equal(body, first):
			r.bodies = append(r.bodies, "{}"...)
		case !differ: // the first body that differs: spell out the earlier ones
			differ = true
			r.bodies = r.bodies[:0]
			for k := range i {
				r.bodies = append(append(r.bodies, "[,"[min(k, 1)]), first...)
			}
			r.bodies = append(append(r.bodies, ','), body...)
		default:
			r.bodies = append(r.bodies, body...)
		}
	}
	if !differ {
		r.common = first
	}
	return r
}

// claimedEvents writes the task.claimed row of a claim with seq seq, from
// what the claim returned (attrs[i]: tasks[i]'s attributes as stored); the
// claim recorded seq in the tasks' event_seqs.
func claimedEvents(ctx context.Context, q querier, tasks []*bt.Task, attrs []string, now, lease, seq int64) error {
	if len(tasks) == 0 {
		return nil
	}
	leaseAt := store.EventTime(fromUS(lease))
	r := newEvRow(store.EventClaimed, "", len(tasks), 60)
	// The worker and the lease are the same for every event of a claim.
	c := appendJSONString(append(r.common, `{"worker_id":`...), tasks[0].WorkerID)
	r.common = append(append(append(c, `,"lease_expires_at":"`...), leaseAt...), `"}`...)
	for i, t := range tasks {
		r.next(t.ID, t.Queue, t.Kind, now, "", attrs[i])
		b := appendJSONString(append(r.bodies, `{"execution_id":`...), t.ExecutionID)
		r.bodies = append(strconv.AppendInt(append(b, `,"attempt":`...), int64(t.Attempt), 10), '}')
	}
	return insertRows(ctx, q, []*evRow{r}, seq, false)
}

// succeededEvents writes the task.started row (seq seq), then the
// task.succeeded row (seq+1), of a batch of successes, naming actor; the
// settle recorded both seqs in the tasks' event_seqs.
func succeededEvents(ctx context.Context, q querier, settled []settledRow, seq int64, actor string) error {
	if len(settled) == 0 {
		return nil
	}
	started, succeeded := newEvRow(store.EventStarted, actor, len(settled), 60), newEvRow(store.EventSucceeded, actor, len(settled), 88)
	oneWorker := true
	for _, s := range settled {
		oneWorker = oneWorker && s.worker == settled[0].worker
	}
	if oneWorker { // the usual batch: one worker's
		started.common = append(appendJSONString([]byte(`{"worker_id":`), settled[0].worker), '}')
	}
	for _, s := range settled {
		started.next(s.taskID, s.queue, s.kind, s.started, "", s.attrs.String)
		b := appendJSONString(append(started.bodies, `{"execution_id":`...), s.execID)
		b = strconv.AppendInt(append(b, `,"attempt":`...), int64(s.attempt), 10)
		if !oneWorker {
			b = appendJSONString(append(b, `,"worker_id":`...), s.worker)
		}
		started.bodies = append(b, '}')

		succeeded.next(s.taskID, s.queue, s.kind, s.finished, "", s.attrs.String)
		b = appendJSONString(append(succeeded.bodies, `{"execution_id":`...), s.execID)
		b = strconv.AppendInt(append(b, `,"attempt":`...), int64(s.attempt), 10)
		b = strconv.AppendInt(append(b, `,"duration_ms":`...), (s.finished-s.started)/1000, 10)
		succeeded.bodies = append(b, '}')
	}
	return insertRows(ctx, q, []*evRow{started, succeeded}, seq, false)
}

// appendJSONString appends s as a JSON string.
func appendJSONString(dst []byte, s string) []byte {
	if !plainJSON(s) {
		b, _ := json.Marshal(s) // cannot fail for a string
		return append(dst, b...)
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// plainJSON reports whether s is a JSON string's content as it is: no
// control character, quote, backslash or non-ASCII byte (json.Marshal
// would escape those). It tests eight bytes at a time (ids are 36).
func plainJSON(s string) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	b := unsafe.Slice(unsafe.StringData(s), len(s)) // read only
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:]) // one load
		q, bs := x^('"'*ones), x^('\\'*ones)
		// A byte >= 0x80, < 0x20, or zero after the xor (a quote, a
		// backslash) sets the high bit of its lane.
		if (x|(x-0x20*ones)|(q-ones)&^q|(bs-ones)&^bs)&highs != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// An enqueue chunk's events fit in one row.
const _ = uint(maxRowEvents - insertChunk)
