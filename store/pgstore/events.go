package pgstore

import (
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

// Events written by these statements store no id of their own (a random
// UUID per row costs the hot path measurably): their id is their cursor,
// which is unique too (readEventID).
const evInsert = `INSERT INTO backstop_events (seq, time, type, subject, queue, kind, attributes, body)
	SELECT nextval('backstop_events_seq_seq'), `

// claimEvents: task.claimed for every claimed row ($2: now).
var claimEvents = `claim_events AS (
	` + evInsert + `$2, 'task.claimed', c.id, c.queue, c.kind, c.attributes,
		jsonb_build_object('worker_id', c.worker_id, 'execution_id', c.execution_id, 'attempt', c.attempt,
			'lease_expires_at', ` + evTime("c.lease_expires_at") + `)
	FROM claimed c
)`

// beatReturning adds to the heartbeat's RETURNING what its events need:
// progressed is true when the beat changed the stored progress.
const beatReturning = `t.queue, t.kind, t.attributes, i.total, i.completed,
		i.has_progress AND (o.progress_total, o.progress_completed) IS DISTINCT FROM (i.total, i.completed) AS progressed`

// beatEvents: task.progress for beats that changed progress ($7: now).
var beatEvents = `beat_events AS (
	` + evInsert + `$7, 'task.progress', b.id, b.queue, b.kind, b.attributes,
		jsonb_build_object('execution_id', b.execution_id, 'total', b.total, 'completed', b.completed)
	FROM beat b WHERE b.progressed
)`

// settleEvents: the events of each applied settlement, in order (the same
// as store.SettleEvents, which documents them).
var settleEvents = `settle_events AS (
	` + evInsert + `e.time, e.type, s.id, s.queue, s.kind, s.attributes, e.body
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
	ORDER BY s.idx, e.ord
)`

// succeededEvents: task.started and task.succeeded for each success.
var succeededEvents = `succeeded_events AS (
	` + evInsert + `e.time, e.type, s.id, s.queue, s.kind, s.attributes, e.body
	FROM (SELECT *, coalesce(attempted_at, finished_at) AS started FROM settled) s
	CROSS JOIN LATERAL (VALUES
		(1, 'task.started', s.started,
			jsonb_build_object('execution_id', s.execution_id, 'attempt', s.attempt, 'worker_id', coalesce(s.worker_id, ''))),
		(2, 'task.succeeded', s.finished_at,
			jsonb_build_object('execution_id', s.execution_id, 'attempt', s.attempt,
				'duration_ms', ` + evMillis("s.started", "s.finished_at") + `))
	) AS e(ord, type, time, body)
	ORDER BY s.idx, e.ord
)`

// cancelEvents: the operator's cancel ($2: now, $3: actor).
var cancelEvents = `cancel_events AS (
	INSERT INTO backstop_events (time, type, subject, queue, kind, attributes, actor, body)
	SELECT $2,
		CASE WHEN c.state = 'running' THEN 'task.cancel_requested' ELSE 'task.canceled' END,
		c.id, c.queue, c.kind, c.attributes, $3::text, jsonb_build_object('from', c.from_state)
	FROM c
)`

// enqueuedReturning is what an enqueue's insert returns for its events.
const enqueuedReturning = `id, queue, kind, state, run_at, priority, max_attempts, attributes, created_at`

// enqueuedEvents: task.enqueued for every inserted row; the actor is
// parameter actorParam.
func enqueuedEvents(actorParam int) string {
	return `ev AS (
	INSERT INTO backstop_events (time, type, subject, queue, kind, attributes, actor, body)
	SELECT created_at, 'task.enqueued', id, queue, kind, attributes, $` +
		strconv.Itoa(actorParam) + `::text,
		jsonb_build_object('merged', false, 'duplicate', false, 'state', state, 'run_at', ` + evTime("run_at") + `,
			'priority', priority, 'max_attempts', max_attempts)
	FROM ins)`
}

// insertEventsScalar writes events with scalar parameters (enqueue runs
// through database/sql too, where arrays are not portable).
func insertEventsScalar(ctx context.Context, db dbtx, events []bt.Event) error {
	const cols = 9
	for start := 0; start < len(events); start += maxInsertRows {
		chunk := events[start:min(start+maxInsertRows, len(events))]
		var b strings.Builder
		b.WriteString("INSERT INTO backstop_events (id, time, type, subject, queue, kind, attributes, actor, body) VALUES ")
		writeValues(&b, len(chunk), cols, []string{"::text", "::timestamptz", "::text", "::text", "::text", "::text", "::jsonb", "::text", "::jsonb"})
		args := make([]any, 0, len(chunk)*cols)
		for _, e := range chunk {
			var attrs any
			if len(e.Attributes) > 0 {
				a, err := json.Marshal(e.Attributes)
				if err != nil {
					return err
				}
				attrs = string(a)
			}
			body := string(e.Body)
			if body == "" {
				body = "{}"
			}
			args = append(args, e.ID, e.Time, e.Type, e.Subject, e.Queue, e.Kind, attrs, e.Actor, body)
		}
		if err := db.exec(ctx, b.String(), db.batchArgs(len(chunk), args)...); err != nil {
			return fmt.Errorf("pgstore: events: %w", err)
		}
	}
	return nil
}

const eventReadCols = `xid::text, seq, id, time, type, subject, queue, kind, attributes, actor, body`

// horizon: the oldest transaction still running, evaluated once per
// statement (an InitPlan), so that the index scan can use it.
const horizon = `(SELECT pg_snapshot_xmin(pg_current_snapshot()))`

// streamFilter is the SQL condition of a filtered stream on parameter $3.
func streamFilter(s store.Stream) string {
	switch s.Kind {
	case store.StreamType:
		return "type = $3"
	case store.StreamQueue:
		return "queue = $3"
	case store.StreamRun:
		return "attributes->>'run_id' = $3"
	case store.StreamWorker:
		return "(subject = $3 OR body->>'worker_id' = $3)"
	}
	return "true"
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
	xid, seq := strconv.FormatUint(cur.Xid, 10), int64(cur.Seq)

	var rs pgx.Rows
	switch q.Stream.Kind {
	case store.StreamAll, "":
		rs, err = s.pool.Query(ctx, `SELECT true, `+eventReadCols+` FROM backstop_events
			WHERE (xid, seq) > ($1::text::xid8, $2::bigint) AND xid < `+horizon+`
			ORDER BY xid, seq LIMIT $3`, xid, seq, limit)
	case store.StreamTask:
		rs, err = s.pool.Query(ctx, `SELECT true, `+eventReadCols+` FROM backstop_events
			WHERE subject = $3 AND (xid, seq) > ($1::text::xid8, $2::bigint) AND xid < `+horizon+`
			ORDER BY xid, seq LIMIT $4`, xid, seq, q.Stream.Value, limit)
	default:
		// A window of the log after the cursor, the matches in it, and
		// the window's last position (where the next read starts when
		// the matches do not fill the page).
		rs, err = s.pool.Query(ctx, `WITH w AS (
				SELECT `+strings.Replace(eventReadCols, "xid::text", "xid", 1)+` FROM backstop_events
				WHERE (xid, seq) > ($1::text::xid8, $2::bigint) AND xid < `+horizon+`
				ORDER BY xid, seq LIMIT $5
			), m AS (
				SELECT * FROM w WHERE `+streamFilter(q.Stream)+` ORDER BY xid, seq LIMIT $4
			)
			SELECT true, `+eventReadCols+` FROM m
			UNION ALL
			(SELECT false, xid::text, seq, '', now(), '', '', '', '', NULL, '', '{}'::jsonb FROM w
			 ORDER BY xid DESC, seq DESC LIMIT 1)`, xid, seq, q.Stream.Value, limit, store.EventScanWindow)
	}
	if err != nil {
		return page, fmt.Errorf("pgstore: read events: %w", err)
	}
	defer rs.Close()
	var last *store.Cursor
	for rs.Next() {
		var (
			match       bool
			xidText     string
			e           bt.Event
			attrs, body []byte
		)
		if err := rs.Scan(&match, &xidText, &e.Seq, &e.ID, &e.Time, &e.Type, &e.Subject, &e.Queue, &e.Kind,
			&attrs, &e.Actor, &body); err != nil {
			return page, fmt.Errorf("pgstore: read events: %w", err)
		}
		x, err := strconv.ParseUint(xidText, 10, 64)
		if err != nil {
			return page, fmt.Errorf("pgstore: read events: xid %q: %w", xidText, err)
		}
		c := store.Cursor{Xid: x, Seq: uint64(e.Seq)}
		if !match {
			last = &c
			continue
		}
		e.Cursor = c.String()
		if e.ID == "" {
			e.ID = e.Cursor
		}
		e.Time = utc(e.Time)
		e.Body = json.RawMessage(body)
		if attrs != nil {
			if err := json.Unmarshal(attrs, &e.Attributes); err != nil {
				return page, err
			}
		}
		page.Events = append(page.Events, e)
	}
	if err := rs.Err(); err != nil {
		return page, fmt.Errorf("pgstore: read events: %w", err)
	}
	sortEvents(page.Events)
	switch {
	case len(page.Events) == limit || last == nil && len(page.Events) > 0:
		page.Next = page.Events[len(page.Events)-1].Cursor
	case last != nil:
		page.Next = last.String()
	}
	return page, nil
}

// sortEvents puts events in cursor order.
func sortEvents(events []bt.Event) {
	slices.SortFunc(events, func(a, b bt.Event) int {
		ca, _ := store.ParseCursor(a.Cursor)
		cb, _ := store.ParseCursor(b.Cursor)
		switch {
		case ca.Less(cb):
			return -1
		case cb.Less(ca):
			return 1
		}
		return 0
	})
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

// DeleteEventsBefore implements store.EventLog.
func (s *Store) DeleteEventsBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		limit = 1000
	}
	tag, err := s.pool.Exec(ctx, `WITH head AS (
			SELECT xid, seq, time FROM backstop_events ORDER BY xid, seq LIMIT $2
		)
		DELETE FROM backstop_events e USING head h
		WHERE e.xid = h.xid AND e.seq = h.seq AND h.time < $1`, before, limit)
	if err != nil {
		return 0, fmt.Errorf("pgstore: delete events: %w", permission(err))
	}
	return int(tag.RowsAffected()), nil
}
