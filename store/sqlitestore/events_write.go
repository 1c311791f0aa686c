package sqlitestore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// This file writes the event log (docs/events.md, "Storage and cost"): one
// row per statement and event type (migration 00009), its per-event values
// in JSON arrays built here, in Go, from what the statement making the
// change returned. One row instead of one per event is what keeps the log
// off the hot path's cost: a claim of 100 tasks inserts one row (a few
// overflow pages) and 100 entries of the narrow (subject, seq) table the
// insert trigger fills, not 100 rows with an index entry each.

// maxRowEvents bounds one row (a reader decodes a whole row to serve any
// event of it).
const maxRowEvents = 1000

// evRow is a log row being built: the JSON arrays without their closing
// bracket.
type evRow struct {
	typ, actor                                         string
	n                                                  int
	time, first                                        int64
	sameTime, anyID                                    bool
	subjects, queues, kinds, times, ids, attrs, bodies []byte
}

func newEvRow(typ, actor string) *evRow {
	return &evRow{typ: typ, actor: actor, sameTime: true}
}

// next starts the row's next event; the caller then appends its body (a
// JSON object) to r.bodies. attrs is the task's attributes as stored (a
// JSON object, or "" for none); id "" makes the event's id its cursor.
func (r *evRow) next(subject, queue, kind string, at int64, id, attrs string) {
	sep := byte('[')
	if r.n > 0 {
		sep = ','
	}
	if r.n == 0 {
		r.first, r.time = at, at
	} else if at != r.first {
		r.sameTime = false
	}
	r.time = max(r.time, at)
	r.n++
	r.subjects = appendJSONString(append(r.subjects, sep), subject)
	r.queues = appendJSONString(append(r.queues, sep), queue)
	r.kinds = appendJSONString(append(r.kinds, sep), kind)
	r.times = strconv.AppendInt(append(r.times, sep), at, 10)
	r.ids = appendJSONString(append(r.ids, sep), id)
	r.anyID = r.anyID || id != ""
	if attrs == "" {
		attrs = "null"
	}
	r.attrs = append(append(r.attrs, sep), attrs...)
	r.bodies = append(r.bodies, sep)
}

// args are the row's values in evInsert's column order.
func (r *evRow) args() []any {
	closed := func(b []byte) string { return string(append(b, ']')) }
	var times, ids any
	if !r.sameTime {
		times = closed(r.times)
	}
	if r.anyID {
		ids = closed(r.ids)
	}
	return []any{r.typ, r.time, r.actor, closed(r.subjects), closed(r.queues), closed(r.kinds), times, ids,
		closed(r.attrs), closed(r.bodies)}
}

const evInsert = `INSERT INTO backstop_events (type, time, actor, subjects, queues, kinds, times, ids, attributes, bodies) VALUES `

// insertRows inserts built rows, in order (so in seq order).
func insertRows(ctx context.Context, q querier, rows []*evRow) error {
	const per = 100
	for start := 0; start < len(rows); start += per {
		chunk := rows[start:min(start+per, len(rows))]
		var sb strings.Builder
		sb.WriteString(evInsert)
		args := make([]any, 0, 10*len(chunk))
		for _, r := range chunk {
			if r.n == 0 {
				continue
			}
			if len(args) > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString("(?,?,?,?,?,?,?,?,?,?)")
			args = append(args, r.args()...)
		}
		if len(args) == 0 {
			continue
		}
		if _, err := q.ExecContext(ctx, sb.String(), args...); err != nil {
			return fmt.Errorf("sqlite: events: %w", err)
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
			rows = append(rows, newEvRow(e.Type, e.Actor))
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
	return insertRows(ctx, q, rows)
}

// claimedEvents writes the task.claimed row(s) of a claim, from what the
// claim returned (attrs[i]: tasks[i]'s attributes as stored).
func claimedEvents(ctx context.Context, q querier, tasks []*bt.Task, attrs []string, now, lease int64) error {
	if len(tasks) == 0 {
		return nil
	}
	leaseAt := store.EventTime(fromUS(lease))
	var rows []*evRow
	for i, t := range tasks {
		if i%maxRowEvents == 0 {
			rows = append(rows, newEvRow(store.EventClaimed, ""))
		}
		r := rows[len(rows)-1]
		r.next(t.ID, t.Queue, t.Kind, now, "", attrs[i])
		b := appendJSONString(append(r.bodies, `{"worker_id":`...), t.WorkerID)
		b = appendJSONString(append(b, `,"execution_id":`...), t.ExecutionID)
		b = strconv.AppendInt(append(b, `,"attempt":`...), int64(t.Attempt), 10)
		b = append(append(append(b, `,"lease_expires_at":"`...), leaseAt...), `"}`...)
		r.bodies = b
	}
	return insertRows(ctx, q, rows)
}

// succeededEvents writes task.started, then task.succeeded, for a batch of
// successes (each task's in that order: the started row comes first).
func succeededEvents(ctx context.Context, q querier, settled []settledRow) error {
	var rows []*evRow
	for start := 0; start < len(settled); start += maxRowEvents {
		chunk := settled[start:min(start+maxRowEvents, len(settled))]
		started, succeeded := newEvRow(store.EventStarted, ""), newEvRow(store.EventSucceeded, "")
		for _, s := range chunk {
			started.next(s.taskID, s.queue, s.kind, s.started, "", s.attrs.String)
			b := appendJSONString(append(started.bodies, `{"execution_id":`...), s.execID)
			b = strconv.AppendInt(append(b, `,"attempt":`...), int64(s.attempt), 10)
			b = appendJSONString(append(b, `,"worker_id":`...), s.worker)
			started.bodies = append(b, '}')

			succeeded.next(s.taskID, s.queue, s.kind, s.finished, "", s.attrs.String)
			b = appendJSONString(append(succeeded.bodies, `{"execution_id":`...), s.execID)
			b = strconv.AppendInt(append(b, `,"attempt":`...), int64(s.attempt), 10)
			b = strconv.AppendInt(append(b, `,"duration_ms":`...), (s.finished-s.started)/1000, 10)
			succeeded.bodies = append(b, '}')
		}
		rows = append(rows, started, succeeded)
	}
	return insertRows(ctx, q, rows)
}

// appendJSONString appends s as a JSON string.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			b, _ := json.Marshal(s) // cannot fail for a string
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
