package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// This file is the SQLite side of the event log's reads (docs/events.md).
// SQLite has one writer at a time and seq is AUTOINCREMENT: a transaction
// that commits later takes higher numbers than every committed one, and a
// reader's snapshot holds committed rows only. So seq order is commit order
// and no read can move past an event that appears later.
//
// The log is stored in batches (migration 00009, events_write.go): one row
// per statement and event type, its per-event values in JSON arrays. A
// reader expands rows here, in Go (decoding a row's arrays once is cheaper
// than extracting element by element in SQL, which parses the whole array
// for each element). An event's cursor is 0-<seq>-<i>, i its place in the
// row from 1; a cursor <seq> (from before batches, or any cursor without a
// place) means after the whole row.

const logRowCols = `seq, type, time, actor, subjects, queues, kinds, times, ids, attributes, bodies`

// logRow is one row of the log, its arrays decoded on demand.
type logRow struct {
	seq                                   int64
	typ, actor                            string
	time                                  int64
	subjectsText, queuesText, kindsText   string
	timesText, idsText                    sql.NullString
	attrsText, bodiesText                 string
	subjects                              []*string
	queues, kinds, ids                    []string
	times                                 []int64
	attrs, bodies                         []json.RawMessage
	decodedSubjects, decodedAll, badArray bool
}

func scanLogRow(rows *sql.Rows) (*logRow, error) {
	r := new(logRow)
	if err := rows.Scan(&r.seq, &r.typ, &r.time, &r.actor, &r.subjectsText, &r.queuesText, &r.kindsText, &r.timesText,
		&r.idsText, &r.attrsText, &r.bodiesText); err != nil {
		return nil, err
	}
	return r, nil
}

// n decodes the subjects and returns how many events the row holds (blanks
// included).
func (r *logRow) n() (int, error) {
	if !r.decodedSubjects {
		if err := json.Unmarshal([]byte(r.subjectsText), &r.subjects); err != nil {
			return 0, fmt.Errorf("event row %d: subjects: %w", r.seq, err)
		}
		r.decodedSubjects = true
	}
	return len(r.subjects), nil
}

// subject is event i's subject (i from 1); ok is false for a blank.
func (r *logRow) subject(i int) (string, bool) {
	s := r.subjects[i-1]
	if s == nil {
		return "", false
	}
	return *s, true
}

func (r *logRow) decode() error {
	if r.decodedAll {
		return nil
	}
	n, err := r.n()
	if err != nil {
		return err
	}
	var errs []error
	arr := func(name, text string, dst any, want bool) {
		if want {
			if err := json.Unmarshal([]byte(text), dst); err != nil {
				errs = append(errs, fmt.Errorf("event row %d: %s: %w", r.seq, name, err))
			}
		}
	}
	arr("times", r.timesText.String, &r.times, r.timesText.Valid)
	arr("ids", r.idsText.String, &r.ids, r.idsText.Valid)
	var err1, err2, err3, err4 error
	r.queues, err1 = decodeEach[string](r.queuesText, n)
	r.kinds, err2 = decodeEach[string](r.kindsText, n)
	r.attrs, err3 = decodeEach[json.RawMessage](r.attrsText, n)
	r.bodies, err4 = decodeBodies(r.bodiesText, n)
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			errs = append(errs, fmt.Errorf("event row %d: %w", r.seq, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if len(r.queues) != n || len(r.kinds) != n || len(r.attrs) != n || len(r.bodies) != n ||
		r.timesText.Valid && len(r.times) != n || r.idsText.Valid && len(r.ids) != n {
		return fmt.Errorf("event row %d: its arrays differ in length", r.seq)
	}
	r.decodedAll = true
	return nil
}

// decodeEach reads one of a row's columns that holds an array, one value
// per event, or one value for all (events_write.go): queues and kinds
// (strings) and attributes (an object or null each).
func decodeEach[T any](text string, n int) ([]T, error) {
	var out []T
	if strings.HasPrefix(text, "[") {
		err := json.Unmarshal([]byte(text), &out)
		return out, err
	}
	var one T
	if err := json.Unmarshal([]byte(text), &one); err != nil {
		return nil, err
	}
	out = make([]T, n)
	for i := range out {
		out[i] = one
	}
	return out, nil
}

// decodeBodies reads a row's bodies: an array of objects, or
// {"common": {…}, "each": […]} where each body is its element of each with
// the members of common (a null element is a blank's).
func decodeBodies(text string, n int) ([]json.RawMessage, error) {
	var out []json.RawMessage
	if strings.HasPrefix(text, "[") {
		err := json.Unmarshal([]byte(text), &out)
		return out, err
	}
	var split struct {
		Common json.RawMessage   `json:"common"`
		Each   []json.RawMessage `json:"each"`
	}
	if err := json.Unmarshal([]byte(text), &split); err != nil {
		return nil, fmt.Errorf("bodies: %w", err)
	}
	for _, e := range split.Each {
		if string(e) != "null" {
			e = mergeBody(e, split.Common)
		}
		out = append(out, e)
	}
	return out, nil
}

// event builds event i (from 1) of a decoded row.
func (r *logRow) event(i int) (bt.Event, error) {
	e := bt.Event{Seq: r.seq, Type: r.typ, Actor: r.actor, Queue: r.queues[i-1], Kind: r.kinds[i-1]}
	e.Subject, _ = r.subject(i)
	e.Cursor = store.Cursor{Seq: uint64(r.seq), Idx: uint64(i)}.String()
	e.ID = e.Cursor
	if r.ids != nil && r.ids[i-1] != "" {
		e.ID = r.ids[i-1]
	}
	at := r.time
	if r.times != nil {
		at = r.times[i-1]
	}
	e.Time = fromUS(at)
	if b := r.bodies[i-1]; len(b) > 0 && string(b) != "null" {
		e.Body = b
	} else {
		e.Body = json.RawMessage(`{}`)
	}
	if a := r.attrs[i-1]; len(a) > 0 && string(a) != "null" {
		if err := json.Unmarshal(a, &e.Attributes); err != nil {
			return e, fmt.Errorf("event row %d: attributes %d: %w", r.seq, i, err)
		}
	}
	return e, nil
}

// position is a place in the log: after event idx of row seq (idx
// math.MaxInt: after the whole row).
type position struct{ seq, idx int64 }

func (p position) before(seq int64, i int) bool {
	return seq > p.seq || seq == p.seq && int64(i) > p.idx
}

func afterPosition(c store.Cursor) position {
	idx := int64(c.Idx)
	if idx == 0 {
		idx = math.MaxInt64
	}
	return position{int64(c.Seq), idx}
}

// matcher tells whether event i of a decoded row is in a filtered stream.
func matcher(s store.Stream) func(r *logRow, i int, e *bt.Event) (bool, error) {
	switch s.Kind {
	case store.StreamQueue:
		return func(r *logRow, i int, _ *bt.Event) (bool, error) { return r.queues[i-1] == s.Value, nil }
	case store.StreamRun:
		return func(_ *logRow, _ int, e *bt.Event) (bool, error) { return e.Attributes["run_id"] == s.Value, nil }
	case store.StreamWorker:
		return func(_ *logRow, _ int, e *bt.Event) (bool, error) {
			if e.Subject == s.Value {
				return true, nil
			}
			var b struct {
				WorkerID any `json:"worker_id"`
			}
			if err := json.Unmarshal(e.Body, &b); err != nil {
				return false, fmt.Errorf("event %s: body: %w", e.Cursor, err)
			}
			w, ok := b.WorkerID.(string)
			return ok && w == s.Value, nil
		}
	case store.StreamExecution:
		return func(_ *logRow, _ int, e *bt.Event) (bool, error) {
			b, err := attemptOf(e)
			return b.ExecutionID == s.Value, err
		}
	case store.StreamNode:
		// The candidates: a worker's events naming the host, and every
		// attempt's events (readNode looks up whose they are).
		return func(_ *logRow, _ int, e *bt.Event) (bool, error) {
			b, err := attemptOf(e)
			if strings.HasPrefix(e.Type, "worker.") {
				return b.Host == s.Value, err
			}
			return b.ExecutionID != "", err
		}
	}
	return func(*logRow, int, *bt.Event) (bool, error) { return true, nil }
}

// attempt is what an event's body says of its attempt and worker.
type attempt struct {
	ExecutionID string `json:"execution_id"`
	WorkerID    string `json:"worker_id"`
	Host        string `json:"host"`
}

func attemptOf(e *bt.Event) (attempt, error) {
	var raw map[string]any
	if err := json.Unmarshal(e.Body, &raw); err != nil {
		return attempt{}, fmt.Errorf("event %s: body: %w", e.Cursor, err)
	}
	str := func(k string) string { v, _ := raw[k].(string); return v }
	return attempt{ExecutionID: str("execution_id"), WorkerID: str("worker_id"), Host: str("host")}, nil
}

// readNode narrows a node stream's candidates (matcher) to those of the
// host's workers: worker events name the host; an attempt's worker is in
// its body (claimed, started, lease_expired), else in its task's row (the
// latest attempt) or the attempt's executions row. It returns at most
// limit events and where the next read starts.
func (s *Store) readNode(ctx context.Context, host string, cands []bt.Event, windowNext string, limit int) ([]bt.Event, string, error) {
	workers := map[string]bool{}
	rows, err := s.r.QueryContext(ctx, `SELECT id FROM backstop_workers WHERE host = ?`, host)
	if err != nil {
		return nil, "", err
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, "", err
		}
		workers[id] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	type key struct{ task, exec string }
	whose := map[key]string{}
	var look []any
	atts := make([]attempt, len(cands))
	for i := range cands {
		a, err := attemptOf(&cands[i])
		if err != nil {
			return nil, "", err
		}
		atts[i] = a
		if !strings.HasPrefix(cands[i].Type, "worker.") && a.WorkerID == "" {
			k := key{cands[i].Subject, a.ExecutionID}
			if _, ok := whose[k]; !ok {
				whose[k] = ""
				look = append(look, cands[i].Subject)
			}
		}
	}
	for start := 0; start < len(look); start += insertChunk {
		chunk := look[start:min(start+insertChunk, len(look))]
		in := placeholders(len(chunk))
		rows, err := s.r.QueryContext(ctx, `SELECT id, execution_id, worker_id FROM backstop_tasks
			WHERE id IN (`+in+`) AND execution_id IS NOT NULL AND worker_id IS NOT NULL
			UNION ALL
			SELECT task_id, execution_id, worker_id FROM backstop_executions WHERE task_id IN (`+in+`)`,
			append(append([]any{}, chunk...), chunk...)...)
		if err != nil {
			return nil, "", err
		}
		for rows.Next() {
			var t, x, w string
			if err := rows.Scan(&t, &x, &w); err != nil {
				rows.Close()
				return nil, "", err
			}
			if _, ok := whose[key{t, x}]; ok {
				whose[key{t, x}] = w
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, "", err
		}
	}
	out := []bt.Event{}
	for i, e := range cands {
		ok := strings.HasPrefix(e.Type, "worker.") // the matcher checked the host
		if !ok {
			w := atts[i].WorkerID
			if w == "" {
				w = whose[key{e.Subject, atts[i].ExecutionID}]
			}
			ok = workers[w]
		}
		if !ok {
			continue
		}
		out = append(out, e)
		if len(out) == limit {
			return out, e.Cursor, nil
		}
	}
	return out, windowNext, nil
}

// EventsEnd implements store.EventLog: the last row's seq (the single
// writer commits in seq order, and a reader sees only committed rows).
func (s *Store) EventsEnd(ctx context.Context) (string, error) {
	var seq sql.NullInt64
	if err := s.r.QueryRowContext(ctx, `SELECT max(seq) FROM backstop_events`).Scan(&seq); err != nil {
		return "", fmt.Errorf("sqlite: events end: %w", err)
	}
	return store.Cursor{Seq: uint64(seq.Int64)}.String(), nil
}

// ReadEvents implements store.EventLog.
func (s *Store) ReadEvents(ctx context.Context, q store.EventQuery) (store.EventPage, error) {
	cur, err := store.ParseCursor(q.After)
	if err != nil {
		return store.EventPage{}, err
	}
	if cur.Xid != 0 {
		return store.EventPage{}, fmt.Errorf("%w %q: a SQLite log's cursor is <seq> or 0-<seq>-<i>", store.ErrBadCursor, q.After)
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, store.MaxEventLimit)
	page := store.EventPage{Events: []bt.Event{}, Next: q.After}
	after := afterPosition(cur)

	var rows *sql.Rows
	switch q.Stream.Kind {
	case store.StreamAll, "":
		// Every row holds at least one event (a row whose events were
		// all deleted is deleted), so limit+1 rows hold the page.
		rows, err = s.r.QueryContext(ctx, `SELECT `+logRowCols+` FROM backstop_events WHERE seq >= ? ORDER BY seq LIMIT ?`,
			after.seq, limit+1)
	case store.StreamTask:
		rows, err = s.r.QueryContext(ctx, `SELECT `+logRowCols+` FROM backstop_events WHERE seq IN (`+taskSeqsSQL+`)
			ORDER BY seq LIMIT ?3`, q.Stream.Value, after.seq, limit+1)
	case store.StreamAudit:
		// The log rows of the audited types with an actor, through their
		// index (migration 00029): a row holds events of one type and one
		// actor, so the rows decide, and limit+1 of them hold the page.
		args := make([]any, 0, len(store.AuditTypes)+2)
		for _, typ := range store.AuditTypes {
			args = append(args, typ)
		}
		rows, err = s.r.QueryContext(ctx, `SELECT `+logRowCols+` FROM backstop_events
			WHERE actor <> '' AND type IN (?`+strings.Repeat(", ?", len(store.AuditTypes)-1)+`) AND seq >= ?
			ORDER BY seq LIMIT ?`, append(args, after.seq, limit+1)...)
	default:
		rows, err = s.r.QueryContext(ctx, `SELECT `+logRowCols+` FROM backstop_events WHERE seq >= ? ORDER BY seq LIMIT ?`,
			after.seq, store.EventScanWindow+1)
	}
	if err != nil {
		return page, fmt.Errorf("sqlite: read events: %w", err)
	}
	defer rows.Close()
	switch q.Stream.Kind {
	case store.StreamAll, "", store.StreamTask, store.StreamAudit:
		page.Events, err = readPlain(rows, after, limit, q.Stream)
		if err == nil && len(page.Events) > 0 {
			page.Next = page.Events[len(page.Events)-1].Cursor
		}
	case store.StreamNode:
		// Every candidate of the window first (the lookups need the
		// rows closed: the read pool is small), then the host's.
		var (
			cands []bt.Event
			next  string
		)
		cands, next, err = readWindow(rows, after, store.EventScanWindow, q.Stream)
		if err == nil {
			err = rows.Err()
		}
		rows.Close()
		if err == nil {
			page.Events, next, err = s.readNode(ctx, q.Stream.Value, cands, next, limit)
		}
		if next != "" {
			page.Next = next
		}
	default:
		var next string
		page.Events, next, err = readWindow(rows, after, limit, q.Stream)
		if next != "" {
			page.Next = next
		}
	}
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return page, fmt.Errorf("sqlite: read events: %w", err)
	}
	return page, nil
}

// readPlain reads up to limit events after a position: of the whole log,
// or of one task (a task stream).
func readPlain(rows *sql.Rows, after position, limit int, st store.Stream) ([]bt.Event, error) {
	out := []bt.Event{}
	for len(out) < limit && rows.Next() {
		r, err := scanLogRow(rows)
		if err != nil {
			return nil, err
		}
		if err := r.decode(); err != nil {
			return nil, err
		}
		for i := 1; i <= len(r.subjects) && len(out) < limit; i++ {
			subject, ok := r.subject(i)
			if !ok || !after.before(r.seq, i) || st.Kind == store.StreamTask && subject != st.Value {
				continue
			}
			e, err := r.event(i)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// readWindow reads a filtered stream: its matches among the next
// store.EventScanWindow positions of the log (blanks included), and the
// cursor where the next read starts when they do not fill the page (the
// window's last position; "" when the window is empty).
func readWindow(rows *sql.Rows, after position, limit int, st store.Stream) ([]bt.Event, string, error) {
	out := []bt.Event{}
	match := matcher(st)
	examined := 0
	var last store.Cursor
	for examined < store.EventScanWindow && len(out) < limit && rows.Next() {
		r, err := scanLogRow(rows)
		if err != nil {
			return nil, "", err
		}
		n, err := r.n()
		if err != nil {
			return nil, "", err
		}
		skip := st.Kind == store.StreamType && r.typ != st.Value // no need to decode the rest
		for i := 1; i <= n && examined < store.EventScanWindow && len(out) < limit; i++ {
			if !after.before(r.seq, i) {
				continue
			}
			examined++
			last = store.Cursor{Seq: uint64(r.seq), Idx: uint64(i)}
			if _, ok := r.subject(i); !ok || skip {
				continue
			}
			if err := r.decode(); err != nil {
				return nil, "", err
			}
			e, err := r.event(i)
			if err != nil {
				return nil, "", err
			}
			ok, err := match(r, i, &e)
			if err != nil {
				return nil, "", err
			}
			if ok {
				out = append(out, e)
			}
		}
	}
	if len(out) == limit {
		return out, out[len(out)-1].Cursor, nil
	}
	if examined == 0 {
		return out, "", nil
	}
	return out, last.String(), nil
}

// taskSeqsSQL selects the log rows holding events of subject ?1 from seq
// ?2 on: those the hot path recorded in the task's row (event_seqs,
// ",<seq>,<seq>…") and those of backstop_event_subjects.
const taskSeqsSQL = `SELECT seq FROM backstop_event_subjects WHERE subject = ?1 AND seq >= ?2
	UNION ALL
	SELECT value FROM json_each((SELECT '[' || substr(event_seqs, 2) || ']' FROM backstop_tasks WHERE id = ?1))
		WHERE value >= ?2`

// taskEvents reads all events of one task, in log order.
func taskEvents(ctx context.Context, q querier, taskID string) ([]bt.Event, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+logRowCols+` FROM backstop_events WHERE seq IN (`+taskSeqsSQL+`)
		ORDER BY seq`, taskID, 0)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out, err := readPlain(rows, position{}, math.MaxInt, store.Stream{Kind: store.StreamTask, Value: taskID})
	if err != nil {
		return nil, err
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

// DeleteEventsBefore implements store.EventLog: it deletes the rows among
// the oldest limit rows whose events are all older than before (a row's
// time is its latest event's), and returns how many events they held. The
// delete trigger drops their entries in backstop_event_subjects.
func (s *Store) DeleteEventsBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		limit = 1000
	}
	rows, err := s.w.QueryContext(ctx, `DELETE FROM backstop_events
		WHERE seq IN (SELECT seq FROM backstop_events ORDER BY seq LIMIT ?) AND time < ?
		RETURNING seq, subjects`, limit, us(before))
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete events: %w", err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var (
			seq      int64
			subjects []*string
			text     string
		)
		if err := rows.Scan(&seq, &text); err != nil {
			return 0, fmt.Errorf("sqlite: delete events: %w", err)
		}
		if err := json.Unmarshal([]byte(text), &subjects); err != nil {
			return 0, fmt.Errorf("sqlite: delete events: row %d: %w", seq, err)
		}
		for _, s := range subjects {
			if s != nil {
				n++
			}
		}
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("sqlite: delete events: %w", err)
	}
	return n, nil
}

// deleteTaskEvents deletes the events of tasks about to be deleted (task
// retention, DLQ purge; their rows must still be there: event_seqs) in the
// caller's transaction: rows that hold only their events go;
// in a row shared with tasks that stay, their events become blanks
// (subject, attributes and body null; readers skip them), so the others
// keep their places and cursors.
func deleteTaskEvents(ctx context.Context, tx querier, ids []any) error {
	if len(ids) == 0 {
		return nil
	}
	in := placeholders(len(ids))
	gone := make(map[string]bool, len(ids))
	for _, id := range ids {
		if s, ok := id.(string); ok {
			gone[s] = true
		}
	}
	rows, err := tx.QueryContext(ctx, `SELECT seq, subjects, attributes, bodies FROM backstop_events WHERE seq IN (
		SELECT seq FROM backstop_event_subjects WHERE subject IN (`+in+`)
		UNION ALL
		SELECT j.value FROM backstop_tasks t, json_each('[' || substr(t.event_seqs, 2) || ']') j
			WHERE t.id IN (`+in+`) AND t.event_seqs IS NOT NULL)`, append(append([]any{}, ids...), ids...)...)
	if err != nil {
		return fmt.Errorf("sqlite: delete task events: %w", err)
	}
	type blanked struct {
		seq                     int64
		subjects, attrs, bodies []byte
	}
	var (
		drop    []any
		rewrite []blanked
	)
	for rows.Next() {
		var (
			seq                 int64
			subj, attrs, bodies string
			ss                  []*string
			as, bs              []json.RawMessage
		)
		if err := rows.Scan(&seq, &subj, &attrs, &bodies); err != nil {
			rows.Close()
			return err
		}
		err := json.Unmarshal([]byte(subj), &ss)
		if err == nil {
			as, err = decodeEach[json.RawMessage](attrs, len(ss))
		}
		if err == nil {
			bs, err = decodeBodies(bodies, len(ss))
		}
		if err != nil {
			rows.Close()
			return fmt.Errorf("sqlite: delete task events: row %d: %w", seq, err)
		}
		if len(as) != len(ss) || len(bs) != len(ss) {
			rows.Close()
			return fmt.Errorf("sqlite: delete task events: row %d: its arrays differ in length", seq)
		}
		left := 0
		for i, s := range ss {
			switch {
			case s == nil:
			case gone[*s]:
				ss[i], as[i], bs[i] = nil, json.RawMessage("null"), json.RawMessage("null")
			default:
				left++
			}
		}
		if left == 0 {
			drop = append(drop, seq)
			continue
		}
		b := blanked{seq: seq}
		if b.subjects, err = json.Marshal(ss); err == nil {
			if b.attrs, err = json.Marshal(as); err == nil {
				b.bodies, err = json.Marshal(bs)
			}
		}
		if err != nil {
			rows.Close()
			return err
		}
		rewrite = append(rewrite, b)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for start := 0; start < len(drop); start += insertChunk {
		chunk := drop[start:min(start+insertChunk, len(drop))]
		if _, err := tx.ExecContext(ctx, `DELETE FROM backstop_events WHERE seq IN (`+placeholders(len(chunk))+`)`, chunk...); err != nil {
			return fmt.Errorf("sqlite: delete task events: %w", err)
		}
	}
	for _, b := range rewrite {
		if _, err := tx.ExecContext(ctx, `UPDATE backstop_events SET subjects = ?, attributes = ?, bodies = ? WHERE seq = ?`,
			string(b.subjects), string(b.attrs), string(b.bodies), b.seq); err != nil {
			return fmt.Errorf("sqlite: delete task events: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM backstop_event_subjects WHERE subject IN (`+in+`)`, ids...); err != nil {
		return fmt.Errorf("sqlite: delete task events: %w", err)
	}
	return nil
}
