package pgstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// This file is the Postgres side of the event log (docs/events.md): the SQL
// that writes each state change's events inside the statement making the
// change (queries.go splices these CTEs in), and the cursor reads.
//
// Gap-free reads: every event row carries the top-level transaction that
// wrote it (xid, default pg_current_xact_id()). A read serves only events
// whose xid is below the oldest transaction still running
// (pg_snapshot_xmin of the statement's snapshot): every transaction below
// that horizon has ended, so the set of those events is final. The cursor
// is (xid, seq) and the order is (xid, seq): any transaction that can still
// commit has an xid at or above the horizon, hence above every served
// cursor, so a reader never moves past an event that appears later.

// evTime formats a timestamptz like store.EventTime, whatever the session's
// TimeZone.
func evTime(expr string) string {
	return `to_char(` + expr + ` AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`
}

// evMillis is b - a in whole milliseconds, truncated like Go's Milliseconds.
func evMillis(a, b string) string {
	return `trunc(extract(epoch FROM ` + b + ` - ` + a + `) * 1000)::bigint`
}

// evTruncate cuts an error message like store.TruncateError.
func evTruncate(expr string) string {
	return `CASE WHEN char_length(` + expr + `) > ` + strconv.Itoa(store.MaxEventError) + ` THEN left(` + expr + `, ` +
		strconv.Itoa(store.MaxEventError) + `) || '…' ELSE ` + expr + ` END`
}

// The log is stored in batches: one row per statement and event type
// (migration 00011). A row's arrays hold its events: subjects[i],
// queues[i], kinds[i], times[i] (NULL times: all at time), ids[i] (NULL
// ids: the event's id is its cursor, which is unique too; a random UUID
// per event costs the hot path measurably), and element i of the JSON
// arrays attributes and bodies. time is the
// row's latest event time (retention). One row per statement instead of
// one per event is what keeps the log off the hot path's cost: a claim of
// 100 tasks inserts one row and one heap tuple, not 100 rows with two index
// entries each. The aggregates of one row are computed by one Agg node over
// the same input, so the arrays line up element by element.

const evBatchInsert = `INSERT INTO backstop_events (seq, type, time, times, subjects, queues, kinds, attributes, bodies, actor)
	SELECT nextval('backstop_events_seq_seq'), `

// beatReturning adds to the heartbeat's RETURNING what its events need:
// progressed is true when the beat changed the stored progress.
const beatReturning = `t.queue, t.kind, t.attributes, i.total, i.completed,
		i.has_progress AND (i.old_total, i.old_completed) IS DISTINCT FROM (i.total, i.completed) AS progressed`

// beatEvents: task.progress for beats that changed progress ($7: now, $8:
// the actor).
var beatEvents = `beat_events AS (
	` + evBatchInsert + `'task.progress', $7, NULL, array_agg(b.id), array_agg(b.queue), array_agg(b.kind), json_agg(b.attributes),
		json_agg(json_build_object('execution_id', b.execution_id, 'total', b.total, 'completed', b.completed)), $8::text
	FROM beat b WHERE b.progressed HAVING count(*) > 0
)`

// settleEvents: the events of each applied settlement (the same as
// store.SettleEvents, which documents them), one row per type. Rows are
// numbered in the order of the event's place in a settlement (started,
// then the outcome, then the new state), so each task's events are in seq
// order. $14 is the actor.
var settleEvents = `settle_events AS (
	` + evBatchInsert + `g.type, g.time, g.times, g.subjects, g.queues, g.kinds, g.attributes, g.bodies, $14::text
	FROM (SELECT e.ord, e.type, max(e.time) AS time, array_agg(e.time) AS times, array_agg(s.id) AS subjects,
		array_agg(s.queue) AS queues, array_agg(s.kind) AS kinds, json_agg(s.attributes) AS attributes,
		json_agg(e.body) AS bodies
	FROM (SELECT *, CASE WHEN uncharged THEN attempt + 1 ELSE attempt END AS att,
		coalesce(attempted_at, finished_at) AS started FROM settled) s
	CROSS JOIN LATERAL (VALUES
		(1, CASE WHEN s.execution_id <> '' AND s.outcome <> 'lease_expired' THEN 'task.started' END, s.started,
			jsonb_build_object('execution_id', s.execution_id, 'attempt', s.att, 'worker_id', coalesce(s.worker_id, ''))),
		(2, CASE WHEN s.execution_id = '' OR s.outcome = 'canceled' THEN NULL
			WHEN s.outcome = 'succeeded' THEN 'task.succeeded'
			WHEN s.outcome = 'lease_expired' THEN 'task.lease_expired'
			WHEN s.outcome = 'snoozed' THEN 'task.snoozed'
			WHEN s.outcome = 'released' THEN 'task.released'
			ELSE 'task.failed' END, s.finished_at,
			CASE s.outcome
				WHEN 'succeeded' THEN jsonb_build_object('execution_id', s.execution_id, 'attempt', s.att,
					'duration_ms', ` + evMillis("s.started", "s.finished_at") + `)
				WHEN 'lease_expired' THEN jsonb_build_object('execution_id', s.execution_id, 'attempt', s.att,
					'worker_id', coalesce(s.worker_id, ''))
				WHEN 'snoozed' THEN jsonb_build_object('execution_id', s.execution_id, 'attempt', s.att,
					'run_at', ` + evTime("s.run_at") + `)
				WHEN 'released' THEN jsonb_build_object('execution_id', s.execution_id, 'attempt', s.att,
					'run_at', ` + evTime("s.run_at") + `)
				ELSE jsonb_build_object('execution_id', s.execution_id, 'attempt', s.att, 'outcome', s.outcome,
					'error', ` + evTruncate("s.error") + `) END),
		(3, CASE WHEN s.state = 'dead' THEN 'task.dead_lettered'
			WHEN s.state = 'canceled' THEN 'task.canceled'
			WHEN s.state IN ('scheduled', 'pending') AND s.execution_id <> '' AND s.outcome NOT IN ('snoozed', 'released')
				THEN 'task.retry_scheduled' END, s.finished_at,
			CASE s.state
				WHEN 'dead' THEN jsonb_build_object('reason', s.dead_reason, 'attempt', s.att, 'dead_count', s.dead_count)
				WHEN 'canceled' THEN jsonb_build_object('execution_id', s.execution_id)
				ELSE jsonb_build_object('attempt', s.att, 'run_at', ` + evTime("s.run_at") + `,
					'delay_ms', ` + evMillis("s.finished_at", "s.run_at") + `) END)
	) AS e(ord, type, time, body)
	WHERE e.type IS NOT NULL
	GROUP BY e.ord, e.type ORDER BY e.ord, e.type) g
)`

// cancelEvents: the operator's cancel ($2: now, $3: actor, $4: the
// operator's reason, recorded when not empty).
var cancelEvents = `cancel_events AS (
	INSERT INTO backstop_events (type, time, subjects, queues, kinds, attributes, actor, bodies)
	SELECT CASE WHEN c.state = 'running' THEN 'task.cancel_requested' ELSE 'task.canceled' END, $2,
		ARRAY[c.id], ARRAY[c.queue], ARRAY[c.kind], json_build_array(c.attributes), $3::text,
		json_build_array(CASE WHEN $4::text = '' THEN json_build_object('from', c.from_state)
			ELSE json_build_object('from', c.from_state, 'reason', $4::text) END)
	FROM c
)`

// enqueuedReturning is what an enqueue's insert returns for its events.
const enqueuedReturning = `id, queue, kind, state, run_at, priority, max_attempts, attributes, created_at`

// insertEventsScalar writes events built in Go, one row each, with scalar
// parameters (enqueue runs through database/sql too, where arrays are not
// portable).
func insertEventsScalar(ctx context.Context, db dbtx, events []bt.Event) error {
	for start := 0; start < len(events); start += maxInsertRows {
		chunk := events[start:min(start+maxInsertRows, len(events))]
		sql, args, err := eventsStatement(chunk)
		if err != nil {
			return err
		}
		if err := db.exec(ctx, sql, db.batchArgs(len(chunk), args)...); err != nil {
			return fmt.Errorf("pgstore: events: %w", err)
		}
	}
	return nil
}

// eventsStatement is the statement insertEventsScalar writes events by.
func eventsStatement(events []bt.Event) (string, []any, error) {
	const cols = 9
	var b strings.Builder
	b.WriteString(`INSERT INTO backstop_events (ids, time, type, subjects, queues, kinds, attributes, actor, bodies)
	SELECT CASE WHEN id = '' THEN NULL ELSE ARRAY[id] END, time, type, ARRAY[subject], ARRAY[queue], ARRAY[kind],
		json_build_array(attributes), actor, json_build_array(body)
	FROM (VALUES `)
	writeValues(&b, len(events), cols, []string{"::text", "::timestamptz", "::text", "::text", "::text", "::text", "::json", "::text", "::json"})
	b.WriteString(`) AS v(id, time, type, subject, queue, kind, attributes, actor, body)`)
	args := make([]any, 0, len(events)*cols)
	for _, e := range events {
		var attrs any
		if len(e.Attributes) > 0 {
			a, err := json.Marshal(e.Attributes)
			if err != nil {
				return "", nil, err
			}
			attrs = string(a)
		}
		body := cmp.Or(string(e.Body), "{}")
		args = append(args, e.ID, e.Time, e.Type, e.Subject, e.Queue, e.Kind, attrs, e.Actor, body)
	}
	return b.String(), args, nil
}

// sqlEventsArrays is eventsStatement's insert as one statement of arrays
// (one column an array, an element an event: the same rows, in the
// arrays' order): one prepared statement for any number of events, as a
// plan's pipeline wants (eventsStatement takes one per maxPreparedRows
// events; a settle batch of ten linear steps wrote its thirty events in
// four).
const sqlEventsArrays = `INSERT INTO backstop_events (ids, time, type, subjects, queues, kinds, attributes, actor, bodies)
	SELECT CASE WHEN id = '' THEN NULL ELSE ARRAY[id] END, time, type, ARRAY[subject], ARRAY[queue], ARRAY[kind],
		json_build_array(attributes::json), actor, json_build_array(body::json)
	FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[])
		WITH ORDINALITY AS v(id, time, type, subject, queue, kind, attributes, actor, body, o)
	ORDER BY o`

// eventsArraysArgs are sqlEventsArrays' arguments for events.
func eventsArraysArgs(events []bt.Event) ([]any, error) {
	n := len(events)
	ids, times, types, subjects := make([]string, n), make([]time.Time, n), make([]string, n), make([]string, n)
	queues, kinds, attrs, actors, bodies := make([]string, n), make([]string, n), make([]*string, n), make([]string, n), make([]string, n)
	for i, e := range events {
		if len(e.Attributes) > 0 {
			a, err := json.Marshal(e.Attributes)
			if err != nil {
				return nil, err
			}
			s := string(a)
			attrs[i] = &s
		}
		ids[i], times[i], types[i], subjects[i], queues[i], kinds[i] = e.ID, e.Time, e.Type, e.Subject, e.Queue, e.Kind
		actors[i], bodies[i] = e.Actor, cmp.Or(string(e.Body), "{}")
	}
	return []any{ids, times, types, subjects, queues, kinds, attrs, actors, bodies}, nil
}

// evUnnest expands a log row e into its events (i: the event's place in
// its row, from 1).
const evUnnest = `ROWS FROM (unnest(e.subjects), unnest(e.ids), unnest(e.times),
	unnest(e.queues), unnest(e.kinds), json_array_elements(e.attributes), json_array_elements(e.bodies))
		WITH ORDINALITY AS u(subject, id, t, queue, kind, attributes, body, i)`

// evRowsAfter is the log rows a cursor read can need, expanded: the first
// rows after the cursor ($1, $2) and below the horizon ($h), at most
// $rows of them, in log order. Limiting the rows BEFORE expanding them is
// what keeps a read's cost to the page it returns: the planner, with
// statistics taken while the log was small (or empty: a young table), used
// to pick a sequential scan and sort EVERY event after the cursor to
// return a thousand (300-440 ms a page at 100,000 events behind, so a
// follower fell further behind). rows = limit + 1 is always enough: the
// cursor's row may have nothing left, and every other row holds at least
// one event that is not a blank (deleteTaskEvents deletes rows that would
// hold only blanks).
func evRowsAfter(h, rows int) string {
	return `(SELECT * FROM backstop_events e
		WHERE (e.xid, e.seq) >= ($1::text::xid8, $2::bigint) AND e.xid < $` + strconv.Itoa(h) + `::text::xid8
		ORDER BY e.xid, e.seq LIMIT $` + strconv.Itoa(rows) + ` + 1) e CROSS JOIN LATERAL ` + evUnnest
}

const eventReadCols = `e.xid::text, e.seq, u.i, coalesce(u.id, ''), coalesce(u.t, e.time), e.type, u.subject,
	coalesce(u.queue, ''), coalesce(u.kind, ''), u.attributes, e.actor, ` + evBody

// evBody is the body of the event u of row e: its element of bodies, with
// the fields of the row's common body (migration 00017) first when it has
// one. Both are compact JSON objects as written (json keeps their text),
// so the two join as text.
const evBody = `CASE WHEN e.common IS NULL THEN coalesce(u.body, '{}'::json)
	WHEN coalesce(u.body::text, '{}') = '{}' THEN e.common
	ELSE (left(e.common::text, -1) || ',' || substr(u.body::text, 2))::json END`

// sqlHorizon reads the horizon: the oldest transaction still running (the
// xmin of a snapshot). It is read by its own statement BEFORE the read's:
// every transaction below it had ended when it was taken, so the read's
// later snapshot sees each of them committed or gone. (Computed inside the
// read statement, the proof leans on the horizon and the scan sharing one
// snapshot; the gap-free conformance test saw events of long transactions
// skipped twice that way under heavy load. Taken first, nothing is assumed
// about one statement's snapshots.)
const sqlHorizon = `SELECT pg_snapshot_xmin(pg_current_snapshot())::text`

// afterCursor: the events after the cursor ($1 xid, $2 seq, $3 place in
// the row), below the horizon (parameter $n). The first condition lets the
// primary key find the row; the second places the event within it. A NULL
// subject is the blank of an event deleted with its task
// (deleteTaskEvents).
func afterCursor(n int) string {
	return `(e.xid, e.seq) >= ($1::text::xid8, $2::bigint) AND (e.xid, e.seq, u.i) > ($1::text::xid8, $2::bigint, $3::bigint)
	AND e.xid < $` + strconv.Itoa(n) + `::text::xid8 AND u.subject IS NOT NULL`
}

// sqlReadAudit reads the audit stream after a cursor ($1 xid, $2 seq, $3
// place in the row) below the horizon ($6), at most $5 events: the log
// rows of the audited types ($4) with an actor, through their index
// (backstop_events_actor, migration 00038), the first $5 + 1 of them
// expanded (as evRowsAfter).
var sqlReadAudit = `SELECT true, ` + eventReadCols + ` FROM (SELECT * FROM backstop_events e
		WHERE e.actor <> '' AND e.type = ANY($4::text[])
		AND (e.xid, e.seq) >= ($1::text::xid8, $2::bigint) AND e.xid < $6::text::xid8
		ORDER BY e.xid, e.seq LIMIT $5 + 1) e CROSS JOIN LATERAL ` + evUnnest + `
	WHERE ` + afterCursor(6) + `
	ORDER BY e.xid, e.seq, u.i LIMIT $5`

// streamFilter is the SQL condition of a filtered stream on parameter $4.
func streamFilter(s store.Stream) string {
	switch s.Kind {
	case store.StreamType:
		return "type = $4"
	case store.StreamQueue:
		return "queue = $4"
	case store.StreamRun:
		return "attributes->>'run_id' = $4"
	case store.StreamWorker:
		return "(subject = $4 OR body->>'worker_id' = $4)"
	case store.StreamExecution:
		return "body->>'execution_id' = $4"
	case store.StreamNode:
		// A worker's own events name its host; an attempt's events name
		// its execution, whose worker is in the body (claimed, started,
		// lease_expired), else in the task row (its latest attempt) or
		// the attempt's executions row.
		return `(CASE WHEN f.type LIKE 'worker.%' THEN f.body->>'host' = $4
			WHEN coalesce(f.body->>'execution_id', '') = '' THEN false
			ELSE coalesce(f.body->>'worker_id',
				(SELECT t.worker_id FROM backstop_tasks t WHERE t.id = f.subject AND t.execution_id = f.body->>'execution_id'),
				(SELECT x.worker_id FROM backstop_executions x WHERE x.execution_id = f.body->>'execution_id'))
				IN (SELECT k.id FROM backstop_workers k WHERE k.host = $4) END)`
	}
	return "true"
}

// cursorArgs are the parameters of afterCursor. A cursor without the
// event's place (written before event batches) is after its whole row.
func cursorArgs(c store.Cursor) (string, int64, int64) {
	idx := int64(c.Idx)
	if idx == 0 && (c.Xid != 0 || c.Seq != 0) {
		idx = store.MaxCursorPart
	}
	return strconv.FormatUint(c.Xid, 10), int64(c.Seq), idx
}

// ReadEvents implements store.EventLog.
func (s *Store) ReadEvents(ctx context.Context, q store.EventQuery) (store.EventPage, error) {
	cur, err := store.ParseCursor(q.After)
	if err != nil {
		return store.EventPage{}, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, store.MaxEventLimit)
	page := store.EventPage{Events: []bt.Event{}, Next: q.After}
	xid, seq, idx := cursorArgs(cur)
	var h string
	if err := s.pool.QueryRow(ctx, sqlHorizon).Scan(&h); err != nil {
		return page, fmt.Errorf("pgstore: read events: horizon: %w", err)
	}

	var rs pgx.Rows
	switch q.Stream.Kind {
	case store.StreamAll, "":
		rs, err = s.queryEvents(ctx, `SELECT true, `+eventReadCols+` FROM `+evRowsAfter(5, 4)+`
			WHERE `+afterCursor(5)+`
			ORDER BY e.xid, e.seq, u.i LIMIT $4`, xid, seq, idx, limit, h)
	case store.StreamAudit:
		// The log rows of the audited types with an actor, through their
		// index (migration 00038): a row holds events of one type and one
		// actor, so the rows decide. Read up to the horizon: no window,
		// and no position to skip to when nothing matched.
		rs, err = s.pool.Query(ctx, sqlReadAudit, xid, seq, idx, store.AuditTypes, limit, h)
	case store.StreamTask:
		rs, err = s.pool.Query(ctx, `SELECT true, `+eventReadCols+` FROM `+taskEventRows("$4::text")+` CROSS JOIN LATERAL `+evUnnest+`
			WHERE u.subject = $4 AND `+afterCursor(6)+`
			ORDER BY e.xid, e.seq, u.i LIMIT $5`, xid, seq, idx, q.Stream.Value, limit, h)
	default:
		// A window of the log after the cursor, the matches in it, and
		// the window's last position (where the next read starts when
		// the matches do not fill the page). Its ORDER BY names w's
		// columns: a bare "xid" there is the output column xid::text
		// (output names win in ORDER BY), and "999" sorts after "1001"
		// as text, which sent the next read back over served events.
		rs, err = s.pool.Query(ctx, `WITH w AS (
				SELECT e.xid, e.seq, u.i, coalesce(u.id, '') AS id, coalesce(u.t, e.time) AS time, e.type, u.subject,
					coalesce(u.queue, '') AS queue, coalesce(u.kind, '') AS kind, u.attributes, e.actor,
					`+evBody+` AS body
				FROM `+evRowsAfter(7, 6)+`
				WHERE `+afterCursor(7)+`
				ORDER BY e.xid, e.seq, u.i LIMIT $6
			), m AS (
				SELECT * FROM w f WHERE `+streamFilter(q.Stream)+` ORDER BY xid, seq, i LIMIT $5
			)
			SELECT true, xid::text, seq, i, id, time, type, subject, queue, kind, attributes, actor, body FROM m
			UNION ALL
			(SELECT false, w.xid::text, w.seq, w.i, '', now(), '', '', '', '', NULL, '', '{}'::json FROM w
			 ORDER BY w.xid DESC, w.seq DESC, w.i DESC LIMIT 1)`, xid, seq, idx, q.Stream.Value, limit, store.EventScanWindow, h)
	}
	if err != nil {
		return page, fmt.Errorf("pgstore: read events: %w", err)
	}
	defer rs.Close()
	var (
		last    *store.Cursor
		cursors []store.Cursor
	)
	for rs.Next() {
		var (
			match bool
			e     bt.Event
			c     store.Cursor
		)
		if err := scanEvent(rs, &e, &c, &match); err != nil {
			return page, fmt.Errorf("pgstore: read events: %w", err)
		}
		if !match {
			last = &c
			continue
		}
		page.Events = append(page.Events, e)
		cursors = append(cursors, c)
	}
	if err := rs.Err(); err != nil {
		return page, fmt.Errorf("pgstore: read events: %w", err)
	}
	sortEvents(page.Events, cursors)
	switch {
	case len(page.Events) == limit || last == nil && len(page.Events) > 0:
		page.Next = page.Events[len(page.Events)-1].Cursor
	case last != nil:
		page.Next = last.String()
	}
	return page, nil
}

// EventsEnd implements store.EventLog: the last log row below the horizon
// (every transaction below it has ended, so no event can still appear
// before it), read backwards on the primary key. Its cursor has no place
// in the row: after the whole row.
func (s *Store) EventsEnd(ctx context.Context) (string, error) {
	var h string
	if err := s.pool.QueryRow(ctx, sqlHorizon).Scan(&h); err != nil {
		return "", fmt.Errorf("pgstore: events end: horizon: %w", err)
	}
	var (
		xid string
		seq int64
	)
	err := s.pool.QueryRow(ctx, `SELECT xid::text, seq FROM backstop_events WHERE xid < $1::text::xid8
		ORDER BY xid DESC, seq DESC LIMIT 1`, h).Scan(&xid, &seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("pgstore: events end: %w", err)
	}
	x, err := strconv.ParseUint(xid, 10, 64)
	if err != nil {
		return "", fmt.Errorf("pgstore: events end: xid %q: %w", xid, err)
	}
	return store.Cursor{Xid: x, Seq: uint64(seq)}.String(), nil
}

// queryEvents runs a read of the all stream with plain sorts off: sorting
// by (xid, seq, i) must be the incremental sort over rows read in log
// order, which expands rows only until the page is full. With statistics
// of a young log the planner estimated one row and chose a full sort,
// which expands every row it is given (up to a thousand rows of a
// thousand events, for a page of a thousand). set_config(…, true) lasts
// until the end of the batch's implicit transaction: the read's
// statement, nothing else (checked: the next statement on the connection
// sees the setting back). Not for the filtered streams: their window is
// read twice from a CTE, which only a plain sort can order (measured 20x
// slower with sorts off).
func (s *Store) queryEvents(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('enable_sort', 'off', true)`)
	b.Queue(sql, args...)
	br := s.pool.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, err
	}
	rs, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &batchRows{Rows: rs, br: br}, nil
}

// batchRows closes its batch with the rows. The read is the batch's last
// statement: its errors are the rows' (Err); closing the batch after it
// only returns the connection.
type batchRows struct {
	pgx.Rows
	br pgx.BatchResults
}

func (r *batchRows) Close() {
	r.Rows.Close()
	_ = r.br.Close()
}

// scanEvent reads one expanded event (eventReadCols, after a leading match
// flag when match is not nil).
func scanEvent(rs pgx.Rows, e *bt.Event, c *store.Cursor, match *bool) error {
	var (
		xidText     string
		i           int64
		attrs, body []byte
	)
	dest := []any{&xidText, &e.Seq, &i, &e.ID, &e.Time, &e.Type, &e.Subject, &e.Queue, &e.Kind, &attrs, &e.Actor, &body}
	if match != nil {
		dest = append([]any{match}, dest...)
	}
	if err := rs.Scan(dest...); err != nil {
		return err
	}
	x, err := strconv.ParseUint(xidText, 10, 64)
	if err != nil {
		return fmt.Errorf("xid %q: %w", xidText, err)
	}
	*c = store.Cursor{Xid: x, Seq: uint64(e.Seq), Idx: uint64(i)}
	e.Cursor = c.String()
	e.ID = cmp.Or(e.ID, e.Cursor)
	e.Time = utc(e.Time)
	// Bodies are stored as json (text), spaced as json_build_object
	// writes it: compact them, so readers get the same text from every path.
	e.Body = json.RawMessage(compactJSON(body))
	if len(attrs) > 0 && !bytes.Equal(attrs, jsonNull) {
		if err := json.Unmarshal(attrs, &e.Attributes); err != nil {
			return err
		}
	}
	return nil
}

var jsonNull = []byte("null")

// compactJSON removes the whitespace outside strings from JSON the
// database wrote (valid by construction): what json.Compact does, without
// its validation, which cost a follower a fifth of its CPU. The result is
// a new slice (pgx reuses the buffer it scanned from).
func compactJSON(src []byte) []byte {
	out := make([]byte, 0, len(src))
	inString, escaped := false, false
	for _, c := range src {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			continue
		}
		out = append(out, c)
	}
	return out
}

// sortEvents puts events in cursor order (the statements return them in
// that order already: checked first, cheaply).
func sortEvents(events []bt.Event, cursors []store.Cursor) {
	less := func(a, b int) bool { return cursors[a].Less(cursors[b]) }
	sorted := true
	for i := 1; i < len(events) && sorted; i++ {
		sorted = !less(i, i-1)
	}
	if sorted {
		return
	}
	order := make([]int, len(events))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case less(a, b):
			return -1
		case less(b, a):
			return 1
		}
		return 0
	})
	out := make([]bt.Event, len(events))
	for i, j := range order {
		out[i] = events[j]
	}
	copy(events, out)
}

// EventCheckpoint implements store.EventLog.
func (s *Store) EventCheckpoint(ctx context.Context, name string) (string, error) {
	var c string
	err := s.pool.QueryRow(ctx, `SELECT cursor FROM backstop_event_checkpoints WHERE name = $1`, name).Scan(&c)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("pgstore: checkpoint %s: %w", name, err)
	}
	return c, nil
}

// SaveEventCheckpoint implements store.EventLog.
func (s *Store) SaveEventCheckpoint(ctx context.Context, name, cursor string, now time.Time) error {
	if _, err := s.pool.Exec(ctx, `INSERT INTO backstop_event_checkpoints (name, cursor, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET cursor = EXCLUDED.cursor, updated_at = EXCLUDED.updated_at`, name, cursor, now); err != nil {
		return fmt.Errorf("pgstore: checkpoint %s: %w", name, permission(err))
	}
	return nil
}

// DeleteEventsBefore implements store.EventLog: it deletes the rows among
// the oldest limit rows whose events are all older than before, and
// returns how many events they held.
func (s *Store) DeleteEventsBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		limit = 1000
	}
	var n int
	err := s.pool.QueryRow(ctx, `WITH head AS (
			SELECT xid, seq, time FROM backstop_events ORDER BY xid, seq LIMIT $2
		), del AS (
			DELETE FROM backstop_events e USING head h
			WHERE e.xid = h.xid AND e.seq = h.seq AND h.time < $1
			RETURNING cardinality(array_remove(e.subjects, NULL)) AS n
		)
		SELECT coalesce(sum(n), 0) FROM del`, before, limit).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("pgstore: delete events: %w", permission(err))
	}
	return n, nil
}
