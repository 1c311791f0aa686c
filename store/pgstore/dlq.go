package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/internal/sqldialect"
)

// This file is the PostgreSQL side of store.DLQ. A replay locks its row with
// FOR UPDATE, so two concurrent replays of one id move it exactly once; a
// bulk redrive locks its batch with FOR UPDATE SKIP LOCKED and replays it
// with one UPDATE.

func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// sqlInsertEvents writes events built in Go, one log row each (the
// operator's paths: few events per transaction).
const sqlInsertEvents = `INSERT INTO backstop_events (ids, time, type, subjects, queues, kinds, attributes, actor, bodies)
SELECT CASE WHEN id = '' THEN NULL ELSE ARRAY[id] END, time, type, ARRAY[subject], ARRAY[queue], ARRAY[kind],
	json_build_array(attributes::json), actor, json_build_array(body::json)
FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[])
	AS e(id, time, type, subject, queue, kind, attributes, actor, body)`

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func insertEvents(ctx context.Context, q execer, events []bt.Event) error {
	if len(events) == 0 {
		return nil
	}
	n := len(events)
	ids, types, subjects, queues, kinds, actors, bodies := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	times := make([]time.Time, n)
	attrs := make([]*string, n)
	for i, e := range events {
		ids[i], times[i], types[i], subjects[i], queues[i], kinds[i], actors[i] = e.ID, e.Time, e.Type, e.Subject, e.Queue, e.Kind, e.Actor
		bodies[i] = string(e.Body)
		if bodies[i] == "" {
			bodies[i] = "{}"
		}
		if len(e.Attributes) > 0 {
			b, err := json.Marshal(e.Attributes)
			if err != nil {
				return err
			}
			s := string(b)
			attrs[i] = &s
		}
	}
	if _, err := q.Exec(ctx, sqlInsertEvents, ids, times, types, subjects, queues, kinds, attrs, actors, bodies); err != nil {
		return fmt.Errorf("pgstore: events: %w", err)
	}
	return nil
}

// AppendEvents implements store.DLQ.
func (s *Store) AppendEvents(ctx context.Context, events []bt.Event) error {
	return insertEvents(ctx, s.pool, events)
}

// Events implements store.DLQ.
func (s *Store) Events(ctx context.Context, taskID string) ([]bt.Event, error) {
	// A task's events are in seq order, and in their rows' order within a
	// row (taskEventRows finds the rows).
	rs, err := s.pool.Query(ctx, `SELECT `+eventReadCols+` FROM `+taskEventRows("$1::text")+` CROSS JOIN LATERAL `+evUnnest+`
		WHERE u.subject = $1 ORDER BY e.seq, u.i`, taskID)
	if err != nil {
		return nil, fmt.Errorf("pgstore: events of %s: %w", taskID, err)
	}
	defer rs.Close()
	out := []bt.Event{}
	for rs.Next() {
		var (
			e bt.Event
			c store.Cursor
		)
		if err := scanEvent(rs, &e, &c, nil); err != nil {
			return nil, fmt.Errorf("pgstore: events of %s: %w", taskID, err)
		}
		out = append(out, e)
	}
	return out, rs.Err()
}

func getTx(ctx context.Context, tx pgx.Tx, sql, id string) (*bt.Task, error) {
	rs, err := tx.Query(ctx, sql, id)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	if !rs.Next() {
		if err := rs.Err(); err != nil {
			return nil, err
		}
		return nil, notFound(id)
	}
	t, err := scanTask(rs)
	if err != nil {
		return nil, err
	}
	rs.Close()
	return t, rs.Err()
}

func setPayload(ctx context.Context, tx pgx.Tx, id string, payload json.RawMessage, limit int) error {
	spilled := limit > 0 && len(payload) > limit
	var inline any
	if !spilled {
		inline = string(payload)
	}
	if _, err := tx.Exec(ctx, `UPDATE backstop_tasks SET payload = $1::json, payload_size = $2, payload_spilled = $3 WHERE id = $4`,
		inline, len(payload), spilled, id); err != nil {
		return err
	}
	if spilled {
		_, err := tx.Exec(ctx, `INSERT INTO backstop_payloads (task_id, data) VALUES ($1, $2)
			ON CONFLICT (task_id) DO UPDATE SET data = EXCLUDED.data`, id, []byte(payload))
		return err
	}
	_, err := tx.Exec(ctx, `DELETE FROM backstop_payloads WHERE task_id = $1`, id)
	return err
}

// openDLQWhere selects open dead letters matching f, last seen at or before
// snapshot, after the cursor; args receives the parameters.
func openDLQWhere(f store.ListFilter, snapshot time.Time, after string, args *[]any) string {
	where := []string{"t.state = 'dead'", "t.dlq_status = 'open'"}
	add := func(cond string, arg any) {
		*args = append(*args, arg)
		where = append(where, fmt.Sprintf(cond, "$"+strconv.Itoa(len(*args))))
	}
	if f.Queue != "" {
		add("t.queue = %s", f.Queue)
	}
	if f.Kind != "" {
		add("t.kind = %s", f.Kind)
	}
	if f.Reason != "" {
		add("t.dead_reason = %s", string(f.Reason))
	}
	if len(f.Attrs) > 0 {
		attrs, _ := json.Marshal(f.Attrs)
		add("t.attributes @> %s::jsonb", string(attrs))
	}
	if f.ErrorContains != "" {
		add("t.last_error LIKE %s", errorLike(f.ErrorContains))
	}
	if !f.Since.IsZero() {
		add("t.last_seen >= %s", f.Since)
	}
	if !f.Until.IsZero() {
		add("t.last_seen <= %s", f.Until)
	}
	add("t.last_seen <= %s", snapshot)
	if after != "" {
		add("t.id > %s", after)
	}
	if f.Where != "" {
		// The client takes a where that does not translate through its Go
		// path (backstop.Redrive: countRedrive, the one-by-one replay),
		// never here: selecting nothing is the safe side.
		cond, err := whereCond(f.Where, args, true)
		if err != nil {
			cond = "false"
		}
		where = append(where, cond)
	}
	return strings.Join(where, " AND ")
}

func collectRedriven(rs pgx.Rows, out []store.Redriven) ([]store.Redriven, error) {
	defer rs.Close()
	for rs.Next() {
		var d store.Redriven
		if err := rs.Scan(&d.ID, &d.Queue, &d.Kind, &d.ReplayCount); err != nil {
			return out, err
		}
		out = append(out, d)
	}
	return out, rs.Err()
}

// RedriveBatch implements store.DLQ.
func (s *Store) RedriveBatch(ctx context.Context, b store.RedriveBatch) (store.RedriveBatchResult, error) {
	var res store.RedriveBatchResult
	// Fast path: pick, replay, record the history and advance the redrive
	// record in one statement, sent outside a transaction block: the
	// server runs it as one implicit transaction (one round trip, no
	// begin, savepoint or commit). A uniqueness violation rolls all of it
	// back, and the batch goes the slow way, one row at a time.
	fastSQL, fastArgs := redriveFast(b, s.redrivesCounted())
	var (
		last    *string
		count   int
		notices int64
		steps   []string // replayed ids that may be workflow steps (store.StepIDs)
		holder  [2]*string
	)
	err := s.pool.QueryRow(ctx, fastSQL, fastArgs...).Scan(&last, &count, &notices, &steps, &holder[0], &holder[1])
	if err == nil {
		if last != nil {
			res.LastID = *last
		}
		res.Replayed, res.Steps, res.Record = count, steps, holderOf(b, holder)
		return res, nil
	}
	if !isUniqueViolation(err) {
		return res, fmt.Errorf("pgstore: redrive: %w", err)
	}

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("pgstore: redrive: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	pick, args := redrivePick(b, "t.id")
	rs, err := tx.Query(ctx, pick, args...)
	if err != nil {
		return res, fmt.Errorf("pgstore: redrive: %w", err)
	}
	ids, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		return res, fmt.Errorf("pgstore: redrive: %w", err)
	}
	if len(ids) == 0 {
		if b.Runner != "" && b.RedriveID != "" { // the pick may have stopped at the record: say how it is
			var holder [2]*string
			if err := tx.QueryRow(ctx, `SELECT runner, status FROM backstop_redrives WHERE id = $1`, b.RedriveID).Scan(&holder[0], &holder[1]); err != nil &&
				!errors.Is(err, pgx.ErrNoRows) {
				return res, fmt.Errorf("pgstore: redrive: %w", err)
			}
			res.Record = holderOf(b, holder)
		}
		return res, nil
	}
	res.LastID = ids[len(ids)-1]
	set := []any{string(b.State), b.RunAt, b.KeepAttempts, b.Now}
	var done []store.Redriven
	sp, err := tx.Begin(ctx)
	if err != nil {
		return res, err
	}
	rows, err := sp.Query(ctx, `UPDATE backstop_tasks SET `+sqldialect.ReplaySetSQL+` WHERE id = ANY($5::text[])
		RETURNING id, queue, kind, replay_count`, append(set, ids)...)
	if err == nil {
		done, err = collectRedriven(rows, done)
	}
	switch {
	case err == nil:
		if err := sp.Commit(ctx); err != nil {
			return res, err
		}
	case isUniqueViolation(err):
		// Some row breaks a uniqueness rule: replay one by one, skipping those.
		if err := sp.Rollback(ctx); err != nil {
			return res, err
		}
		done = nil
		for _, id := range ids {
			sp, err := tx.Begin(ctx)
			if err != nil {
				return res, err
			}
			rows, err := sp.Query(ctx, `UPDATE backstop_tasks SET `+sqldialect.ReplaySetSQL+` WHERE id = $5
				RETURNING id, queue, kind, replay_count`, append(set, id)...)
			var one []store.Redriven
			if err == nil {
				one, err = collectRedriven(rows, nil)
			}
			if err != nil {
				if rbErr := sp.Rollback(ctx); rbErr != nil {
					return res, rbErr
				}
				if isUniqueViolation(err) {
					res.Conflicts = append(res.Conflicts, id)
					continue
				}
				return res, err
			}
			if err := sp.Commit(ctx); err != nil {
				return res, err
			}
			done = append(done, one...)
		}
	default:
		return res, fmt.Errorf("pgstore: redrive: %w", err)
	}
	queues := map[string]struct{}{}
	rids := make([]string, len(done))
	for i, d := range done {
		queues[d.Queue] = struct{}{}
		rids[i] = d.ID
	}
	if err := replayOrdering(ctx, tx, rids); err != nil { // ordering.go
		return res, err
	}
	events := store.RedriveEvents(b, done, res.Conflicts)
	if err := insertEvents(ctx, tx, events); err != nil {
		return res, err
	}
	res.Replayed, res.Steps = len(done), store.StepIDs(done)
	if b.RedriveID != "" {
		var holder [2]*string
		if err := tx.QueryRow(ctx, `UPDATE backstop_redrives SET cursor = $1, replayed = replayed + $2, failed = failed + $3
			WHERE id = $4 RETURNING runner, status`, res.LastID, res.Replayed, len(res.Conflicts), b.RedriveID).Scan(&holder[0], &holder[1]); err != nil &&
			!errors.Is(err, pgx.ErrNoRows) {
			return res, err
		}
		res.Record = holderOf(b, holder)
		ids, outcomes, details := make([]string, 0, len(done)+len(res.Conflicts)), []string{}, []string{}
		for _, d := range done {
			ids, outcomes, details = append(ids, d.ID), append(outcomes, store.OutcomeReplayed), append(details, "")
		}
		for _, id := range res.Conflicts {
			ids, outcomes, details = append(ids, id), append(outcomes, store.OutcomeConflict),
				append(details, "a live task holds its idempotency key or merge key")
		}
		if _, err := tx.Exec(ctx, `INSERT INTO backstop_redrive_items (redrive_id, task_id, outcome, detail, at)
			SELECT $1, i, o, d, $5 FROM unnest($2::text[], $3::text[], $4::text[]) AS x(i, o, d) WHERE true
			ON CONFLICT (redrive_id, task_id) DO UPDATE SET outcome = excluded.outcome, detail = excluded.detail, at = excluded.at
			WHERE backstop_redrive_items.outcome <> 'replayed'`,
			b.RedriveID, ids, outcomes, details, b.Now); err != nil {
			return res, err
		}
	}
	if b.State == bt.StatePending && len(queues) > 0 {
		qs := make([]string, 0, len(queues))
		for q := range queues {
			qs = append(qs, q)
		}
		if _, err := tx.Exec(ctx, `SELECT count(pg_notify('`+wakeupChannel+`', q)::text) FROM unnest($1::text[]) q`, qs); err != nil {
			return res, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("pgstore: redrive: commit: %w", err)
	}
	return res, nil
}

// holderOf is RedriveBatchResult.Record from the record's runner and
// status as the batch's statement returned them (nil: no record, or no
// Runner asked for it).
func holderOf(b store.RedriveBatch, h [2]*string) *store.RedriveHolder {
	if b.Runner == "" || h[0] == nil || h[1] == nil {
		return nil
	}
	return &store.RedriveHolder{Runner: *h[0], Status: *h[1]}
}

// redrivePick is the selection of a redrive batch's rows, locked, in id
// order (cols: what it returns of each), and its arguments. With a Runner,
// it selects nothing unless the record is running under it.
func redrivePick(b store.RedriveBatch, cols string) (string, []any) {
	var args []any
	where := openDLQWhere(b.Filter, b.Snapshot, b.AfterID, &args)
	if b.IDs != nil { // matched in Go by the client (store.RedriveBatch)
		args = append(args, b.IDs)
		where += " AND t.id = ANY($" + strconv.Itoa(len(args)) + "::text[])"
	}
	if b.Runner != "" && b.RedriveID != "" {
		args = append(args, b.RedriveID, b.Runner)
		where += " AND EXISTS (SELECT 1 FROM backstop_redrives g WHERE g.id = $" + strconv.Itoa(len(args)-1) +
			" AND g.status = 'running' AND g.runner = $" + strconv.Itoa(len(args)) + ")"
	}
	args = append(args, b.Limit)
	return `SELECT ` + cols + ` FROM backstop_tasks t WHERE ` + where + ` ORDER BY t.id LIMIT $` + strconv.Itoa(len(args)) +
		` FOR UPDATE SKIP LOCKED`, args
}

// redriveFast is RedriveBatch's fast path, one statement: pick, replay,
// record the history and each item's outcome, advance the redrive record.
// Its pick also returns the locked rows' tuple ids, and the UPDATE finds
// them by those (a Tid Scan), not by a primary-key lookup each, as the
// claim does: a row this statement locked cannot move before its UPDATE.
// Only the rows it made buffered (ordered tasks) are looked up in the
// ordering table again. The batch's dlq.replayed events are one linked log
// row (events_links.go), numbered once the rows are locked, whose number
// each replayed task appends to its event_links: no GIN entry per event.
// Its aggregates read the replayed rows sorted by id once (the sort that
// numbers them), not each sorting its own input; the fields every event
// shares (redrive, patched, keep_attempts) are written once, in the row's
// common body, and each element's body ({"replay_count":n}, and the reason)
// is text parsed once (evBodies): a reader sees the bodies RedriveEvents
// writes, field for field.
// Each item's outcome is a plain insert: a task past the cursor has none
// yet, and one that has (recorded by an earlier, failed attempt at it) is
// a uniqueness violation, which sends the batch the slow way, whose insert
// updates it.
//
// With counted (the schema's triggers read the count mark: redrivesCounted)
// the statement counts its own batch, as the claim does (counts.go): each
// replayed task leaves (queue, dead, open) and its dead letters' group
// (the pick returns the group's columns as the locked row holds them) and
// enters (queue, its new state, no dead-letter status), appended as one
// delta row per group, and the statement is marked counted, so that the
// two statement triggers skip it instead of reading its transition tables
// (about a tenth of the batch's server time).
func redriveFast(b store.RedriveBatch, counted bool) (string, []any) {
	cols := "t.id, t.ctid AS tid"
	if counted {
		cols += ", t.queue, t.dlq_group, t.dead_reason, t.last_error"
	}
	pick, args := redrivePick(b, cols)
	n := len(args)
	p := func(i int) string { return "$" + strconv.Itoa(n+i) }
	// Event ids: a fresh UUIDv7's first 24 hex digits (with dashes) and the
	// row number, so a batch's ids are time-ordered and insert together.
	prefix := uuid.Must(uuid.NewV7()).String()[:24]
	return `
WITH picked AS (` + pick + `),
ev_seq AS ( -- the batch's event row: its number, taken once the picked rows are locked, is its link
	SELECT ` + evSeq + ` AS seq FROM picked HAVING count(*) > 0
),
upd AS (
	UPDATE backstop_tasks t SET state = CASE WHEN EXISTS (SELECT 1 FROM backstop_ordering_tasks o WHERE o.task_id = t.id)
			THEN 'buffered' ELSE ` + p(1) + ` END, run_at = ` + p(2) + `, attempt = CASE WHEN ` + p(3) + ` THEN t.attempt ELSE 0 END,
		lease_expires_at = NULL, last_error = NULL, cancel_requested_at = NULL, finalized_at = NULL,
		worker_id = NULL, execution_id = NULL, attempted_at = NULL, dlq_status = NULL,
		replay_count = t.replay_count + 1, updated_at = ` + p(4) + `, event_links = t.event_links || (SELECT seq FROM ev_seq)
	WHERE t.ctid = ANY(ARRAY(SELECT tid FROM picked))
	RETURNING t.id, t.queue, t.kind, t.attributes, t.replay_count, t.state
), ord AS ( -- ordered tasks wait for their key (ordering.go): those upd made buffered
	UPDATE backstop_ordering_tasks o SET status = 'replay' FROM upd WHERE upd.state = 'buffered' AND o.task_id = upd.id
), ev AS ( -- one linked row holding every replay's event, in id order (below)
	INSERT INTO backstop_events (seq, link, ids, time, type, subjects, queues, kinds, attributes, actor, common, bodies)
	SELECT (SELECT seq FROM ev_seq), (SELECT seq FROM ev_seq), array_agg(` + p(7) + ` || lpad(to_hex(u.n), 12, '0')),
		` + p(4) + `, 'dlq.replayed', array_agg(u.id), array_agg(u.queue), array_agg(u.kind), json_agg(u.attributes), ` + p(5) + `,
		('{"redrive_id":' || to_json(` + p(6) + `::text)::text || ',"patched":false,"keep_attempts":' || ` + p(3) + `::bool::text || '}')::json,
		` + evBodies(`'{"replay_count":' || u.replay_count || (SELECT CASE WHEN `+p(8)+`::text = '' THEN '' ELSE ',"reason":' || to_json(`+p(8)+`::text)::text END) || '}'`) + `
	FROM (SELECT *, row_number() OVER (ORDER BY id) AS n FROM upd ORDER BY id) u HAVING count(*) > 0
), rec AS (
	UPDATE backstop_redrives SET cursor = coalesce((SELECT max(id) FROM picked), cursor),
		replayed = replayed + (SELECT count(*) FROM upd)
	WHERE id = ` + p(6) + `
	RETURNING runner, status
), items AS ( -- each item's outcome, a plain insert (above)
	INSERT INTO backstop_redrive_items (redrive_id, task_id, outcome, detail, at)
	SELECT ` + p(6) + `::text, u.id, 'replayed', '', ` + p(4) + ` FROM upd u WHERE ` + p(6) + `::text <> ''
)` + redriveCounted(counted) + `
SELECT (SELECT max(id) FROM picked), (SELECT count(*) FROM upd),
	(SELECT count(pg_notify('` + wakeupChannel + `', q.queue)) FROM (SELECT DISTINCT queue FROM upd) q WHERE ` + p(1) + ` = 'pending'),
	(SELECT array_agg(id ORDER BY id) FROM upd WHERE strpos(id, '.') > 0),
	(SELECT runner FROM rec), (SELECT status FROM rec)`,
		append(args, string(b.State), b.RunAt, b.KeepAttempts, b.Now, b.Actor, b.RedriveID, prefix, b.Reason)
}

// redriveCounted is redriveFast's count of its own batch (counted), or
// nothing: the CTEs that append the batch's task count deltas (every
// replayed task from (queue, dead, open) to (queue, its state, no dead-letter status)) and
// its dead-letter group deltas (each picked row from its group: the
// trigger's columns, migration 00062; upd replays every picked row, which
// it reaches by the tuple id the pick locked, as the cursor and the count
// of the replayed already take; the pick returns the columns the locked
// version holds, and upd clears last_error), and mark the
// statement counted for an UPDATE (migrations 00060, 00064). With no row
// replayed they append nothing and set no mark. The mark is set in the
// task counts' SELECT, evaluated once its rows exist, before the
// statement's triggers fire (at its end, after every CTE ran).
func redriveCounted(counted bool) string {
	if !counted {
		return ""
	}
	return `, counted AS ( -- the batch counts itself (counts.go); the triggers skip it
	INSERT INTO backstop_task_count_deltas (queue, state, dlq_status, n)
	SELECT queue, state, dlq_status, n FROM (
		SELECT queue, 'dead' AS state, 'open' AS dlq_status, -count(*) AS n FROM upd GROUP BY queue
		UNION ALL
		SELECT queue, state, '', count(*) FROM upd GROUP BY queue, state) c
	WHERE set_config('backstop.counted', 'UPDATE', true) <> ''
), counted_groups AS ( -- and its dead letters' groups (migration 00062)
	INSERT INTO backstop_dlq_group_count_deltas (dlq_status, queue, dlq_group, dead_reason, last_error, n)
	SELECT 'open', p.queue, p.dlq_group, p.dead_reason, left(p.last_error, 200), -count(*)
	FROM picked p WHERE p.dlq_group IS NOT NULL
	GROUP BY 2, 3, 4, 5
)`
}

// redrivesCountedVersion: the first schema whose dead-letter groups'
// trigger skips a statement marked counted for an UPDATE (00064; the task
// counts' reads the mark since 00060).
const redrivesCountedVersion = 64

// redrivesCounted: the redrive's fast statement counts itself (the schema
// the store runs against reads the mark; forms.go).
func (s *Store) redrivesCounted() bool {
	v := s.schemaAt.Load()
	return v == 0 || v >= redrivesCountedVersion
}

// purgeBatch deletes a batch of dead letters (sqldialect's PurgeDLQ
// loops over it) in one statement: $1 statuses, $2 before, $3 limit, $4
// the ids it is narrowed to (NULL: none).
func purgeBatch(ctx context.Context, db sqldialect.DB, statuses, ids []string, before time.Time, limit int, event func(int) bt.Event) (int, error) {
	var only any // NULL
	if ids != nil {
		only = textArray(ids)
	}
	var n int
	err := sqldialect.InTx(ctx, db, func(tx sqldialect.Tx) error {
		if err := pgxOf(tx).QueryRow(ctx, `
WITH gone AS (
	DELETE FROM backstop_tasks WHERE id IN (SELECT id FROM backstop_tasks
		WHERE state = 'dead' AND dlq_status = ANY($1::text[]) AND updated_at < $2
			AND ($4::text[] IS NULL OR id = ANY($4::text[])) ORDER BY id LIMIT $3
		FOR UPDATE SKIP LOCKED)
	RETURNING id
), e AS (DELETE FROM backstop_executions WHERE task_id IN (SELECT id FROM gone)),
p AS (DELETE FROM backstop_payloads WHERE task_id IN (SELECT id FROM gone)),
`+deleteTaskEvents("gone")+`
SELECT count(*) FROM gone`, textArray(statuses), before, limit, only).Scan(&n); err != nil || n == 0 || event == nil {
			return err
		}
		return insertEvents(ctx, pgxOf(tx), []bt.Event{event(n)})
	})
	return n, err
}

// CountRedrive implements store.DLQ.
func (s *Store) CountRedrive(ctx context.Context, b store.RedriveBatch) (int, error) {
	var args []any
	where := openDLQWhere(b.Filter, b.Snapshot, b.AfterID, &args)
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM backstop_tasks t WHERE `+where, args...).Scan(&n)
	return n, err
}
