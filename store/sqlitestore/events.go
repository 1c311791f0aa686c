package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// This file is the SQLite side of the event log's reads (docs/events.md).
// SQLite has one writer at a time and seq is AUTOINCREMENT: a transaction
// that commits later takes higher numbers than every committed one, and a
// reader's snapshot holds committed rows only. So seq order is commit order,
// the cursor is seq alone, and no read can move past an event that appears
// later. The writes are in tasks.go and dlq.go, each in the transaction of
// the change.

const eventSelect = `SELECT seq, id, time, type, subject, queue, kind, attributes, actor, body FROM backstop_events`

func streamWhere(s store.Stream) string {
	switch s.Kind {
	case store.StreamType:
		return "type = ?"
	case store.StreamTask:
		return "subject = ?"
	case store.StreamQueue:
		return "queue = ?"
	case store.StreamRun:
		return "json_extract(attributes, '$.run_id') = ?"
	case store.StreamWorker:
		return "(subject = ?1 OR json_extract(body, '$.worker_id') = ?1)"
	}
	return "1"
}

// ReadEvents implements store.EventLog.
func (s *Store) ReadEvents(ctx context.Context, q store.EventQuery) (store.EventPage, error) {
	cur, err := store.ParseCursor(q.After)
	if err != nil {
		return store.EventPage{}, err
	}
	if cur.Xid != 0 || cur.Idx != 0 {
		return store.EventPage{}, fmt.Errorf("%w %q: a SQLite log's cursor is a sequence number", store.ErrBadCursor, q.After)
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, store.MaxEventLimit)
	page := store.EventPage{Events: []bt.Event{}, Next: q.After}
	after := int64(cur.Seq)

	var rows *sql.Rows
	switch q.Stream.Kind {
	case store.StreamAll, "":
		rows, err = s.r.QueryContext(ctx, eventSelect+` WHERE seq > ? ORDER BY seq LIMIT ?`, after, limit)
	case store.StreamTask:
		rows, err = s.r.QueryContext(ctx, eventSelect+` WHERE subject = ? AND seq > ? ORDER BY seq LIMIT ?`,
			q.Stream.Value, after, limit)
	default:
		// Matches within a bounded window after the cursor; the window's
		// end is where the next read starts when they do not fill a page.
		var end sql.NullInt64
		if err := s.r.QueryRowContext(ctx, `SELECT max(seq) FROM (SELECT seq FROM backstop_events WHERE seq > ? ORDER BY seq LIMIT ?)`,
			after, store.EventScanWindow).Scan(&end); err != nil {
			return page, fmt.Errorf("sqlite: read events: %w", err)
		}
		if !end.Valid {
			return page, nil
		}
		where := streamWhere(q.Stream)
		if q.Stream.Kind == store.StreamWorker {
			rows, err = s.r.QueryContext(ctx, eventSelect+` WHERE `+where+` AND seq > ?2 AND seq <= ?3 ORDER BY seq LIMIT ?4`,
				q.Stream.Value, after, end.Int64, limit)
		} else {
			rows, err = s.r.QueryContext(ctx, eventSelect+` WHERE `+where+` AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?`,
				q.Stream.Value, after, end.Int64, limit)
		}
		if err == nil {
			page.Next = store.Cursor{Seq: uint64(end.Int64)}.String()
		}
	}
	if err != nil {
		return page, fmt.Errorf("sqlite: read events: %w", err)
	}
	events, err := scanEvents(rows)
	if err != nil {
		return page, fmt.Errorf("sqlite: read events: %w", err)
	}
	page.Events = events
	if len(events) == limit || len(events) > 0 && q.Stream.Kind != store.StreamType && q.Stream.Kind != store.StreamQueue &&
		q.Stream.Kind != store.StreamRun && q.Stream.Kind != store.StreamWorker {
		page.Next = events[len(events)-1].Cursor
	}
	return page, nil
}

func scanEvents(rows *sql.Rows) ([]bt.Event, error) {
	defer rows.Close()
	out := []bt.Event{}
	for rows.Next() {
		var (
			e     bt.Event
			at    int64
			attrs sql.NullString
			body  string
		)
		if err := rows.Scan(&e.Seq, &e.ID, &at, &e.Type, &e.Subject, &e.Queue, &e.Kind, &attrs, &e.Actor, &body); err != nil {
			return nil, err
		}
		e.Time = fromUS(at)
		e.Body = json.RawMessage(body)
		e.Cursor = store.Cursor{Seq: uint64(e.Seq)}.String()
		if e.ID == "" { // written by the hot path's SQL: the cursor is its id
			e.ID = e.Cursor
		}
		var err error
		if e.Attributes, err = decodeAttrs(attrs); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// EventCheckpoint implements store.EventLog.
func (s *Store) EventCheckpoint(ctx context.Context, name string) (string, error) {
	var c string
	err := s.r.QueryRowContext(ctx, `SELECT cursor FROM backstop_event_checkpoints WHERE name = ?`, name).Scan(&c)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("sqlite: checkpoint %s: %w", name, err)
	}
	return c, nil
}

// SaveEventCheckpoint implements store.EventLog.
func (s *Store) SaveEventCheckpoint(ctx context.Context, name, cursor string, now time.Time) error {
	if _, err := s.w.ExecContext(ctx, `INSERT INTO backstop_event_checkpoints (name, cursor, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET cursor = excluded.cursor, updated_at = excluded.updated_at`, name, cursor, us(now)); err != nil {
		return fmt.Errorf("sqlite: checkpoint %s: %w", name, err)
	}
	return nil
}

// DeleteEventsBefore implements store.EventLog.
func (s *Store) DeleteEventsBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		limit = 1000
	}
	res, err := s.w.ExecContext(ctx, `DELETE FROM backstop_events
		WHERE seq IN (SELECT seq FROM backstop_events ORDER BY seq LIMIT ?) AND time < ?`, limit, us(before))
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete events: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}
