package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/store"
)

// History: the drain against a table that already holds many finished
// tasks, the rows retention keeps (succeeded tasks within their retention
// window, their events, an execution row for each that failed once
// first). The history is written straight into the store's tables, in
// bulk (Postgres: INSERT ... SELECT over generate_series; SQLite: the same
// over a recursive CTE), shaped as the hot path writes it: task rows with
// their event links, one event row per type per 1,000 tasks (task.enqueued,
// task.claimed, task.started, task.succeeded), ids that sort before every
// id the engine makes (the history is older).

// HistoryRetention is the succeeded retention the history is placed
// against (the configuration's default, retention.succeeded: 24h).
const HistoryRetention = 24 * time.Hour

// historyGroup is the tasks per event row the fill writes.
const historyGroup = 1000

// historyChunk is the tasks per fill statement (one transaction each);
// historyFillers statements run at once on Postgres.
const (
	historyChunk   = 100_000
	historyFillers = 2
)

// HistoryConfig sizes a history run. Zero values take the defaults named.
type HistoryConfig struct {
	// Rows of finished history to fill before the drain (0: none, the
	// empty-history baseline).
	Rows int
	// RetriedEvery: every RetriedEvery-th history task failed once before
	// it succeeded, so it has an execution row. Default: 10; negative: none.
	RetriedEvery int
	// Expired places the history before the retention window (finished
	// 25-48 h ago) instead of inside it (the last 23 h): what a retention
	// round deletes.
	Expired bool
	// Retain runs one retention round (succeeded tasks older than
	// HistoryRetention, with their executions and events) alongside the
	// drain and reports how long it took.
	Retain bool
	// Probe tasks are claimed and settled after the drain, ProbeBatch at a
	// time by one caller, each claim and settle timed. Default: 2,000;
	// negative: no probe.
	Probe int
	// ProbeBatch is the tasks per probe claim. Default: 10.
	ProbeBatch int
}

func (c HistoryConfig) withDefaults() HistoryConfig {
	if c.RetriedEvery == 0 {
		c.RetriedEvery = 10
	}
	if c.Probe == 0 {
		c.Probe = 2000
	}
	if c.ProbeBatch <= 0 {
		c.ProbeBatch = 10
	}
	return c
}

// HistoryResult is what a history run measured.
type HistoryResult struct {
	Drain *Result
	// Fill: the history written, and how long that took.
	Rows, Executions, EventRows int
	FillElapsed                 time.Duration
	// DBBytes is the database's size after the drain and the probe
	// (Postgres: pg_database_size; SQLite: the file's pages).
	DBBytes int64
	// The probe's claim and settle latencies.
	ProbeClaims                     int
	ClaimP50, ClaimP99, ClaimMax    time.Duration
	SettleP50, SettleP99, SettleMax time.Duration
	RetainDeleted                   int
	RetainElapsed                   time.Duration
	retainErr                       error
}

// Summary is the history line `backstop bench --history` prints before
// the drain's summary; scripts parse it. rows are the rows this run
// filled; the latencies are the probe's (absent with no probe).
func (r *HistoryResult) Summary() string {
	s := fmt.Sprintf("history: rows=%d db_bytes=%d", r.Rows, r.DBBytes)
	if r.ProbeClaims > 0 {
		s += fmt.Sprintf(" claim_p50=%s claim_p99=%s settle_p50=%s settle_p99=%s",
			ms(r.ClaimP50), ms(r.ClaimP99), ms(r.SettleP50), ms(r.SettleP99))
	}
	if r.RetainElapsed > 0 {
		s += fmt.Sprintf(" retain_deleted=%d retain_elapsed=%.3fs", r.RetainDeleted, r.RetainElapsed.Seconds())
	}
	return s
}

// RunHistory fills hc.Rows of history in cfg's queue (cfg.Queue, a fresh
// one by default) on the database of the store s (the client's), drains
// cfg.N tasks there as Drain does (with a retention round alongside when
// hc.Retain), then runs the claim probe and measures the database.
func RunHistory(ctx context.Context, c *backstop.Client, s any, cfg Config, hc HistoryConfig) (*HistoryResult, error) {
	cfg, hc = cfg.withDefaults(), hc.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if hc.Rows < 0 {
		return nil, errors.New("bench: --history must not be negative")
	}
	res := &HistoryResult{}
	if hc.Rows > 0 {
		start := time.Now()
		fr, err := FillHistory(ctx, s, cfg.Queue, hc.Rows, hc.RetriedEvery, hc.Expired, time.Now())
		if err != nil {
			return nil, err
		}
		res.Rows, res.Executions, res.EventRows, res.FillElapsed = fr.Rows, fr.Executions, fr.EventRows, time.Since(start)
		fmt.Fprintf(cfg.Progress, "bench: history filled rows=%d executions=%d event_rows=%d in %.1fs (%.0f/s) expired=%t queue=%s\n",
			res.Rows, res.Executions, res.EventRows, res.FillElapsed.Seconds(),
			float64(res.Rows)/res.FillElapsed.Seconds(), hc.Expired, cfg.Queue)
	}
	var retained chan struct{}
	if hc.Retain {
		retained = make(chan struct{})
		go func() {
			defer close(retained)
			start := time.Now()
			counts, err := maintenance.Retain(ctx, c.Store(), time.Now(),
				maintenance.RetentionPolicy{Succeeded: HistoryRetention, Canceled: -1, DeadLetters: -1, Events: -1, Runs: -1})
			res.RetainDeleted, res.RetainElapsed, res.retainErr = counts.Succeeded, time.Since(start), err
		}()
	}
	d, err := Drain(ctx, c, cfg)
	res.Drain = d
	if retained != nil {
		<-retained
		err = errors.Join(err, res.retainErr)
	}
	if err != nil {
		return res, err
	}
	if hc.Probe > 0 {
		claims, settles, err := Probe(ctx, c, cfg.Queue, hc.Probe, hc.ProbeBatch)
		if err != nil {
			return res, err
		}
		res.ProbeClaims = len(claims)
		res.ClaimP50, res.ClaimP99, res.ClaimMax = percentile(claims, 0.5), percentile(claims, 0.99), claims[len(claims)-1]
		res.SettleP50, res.SettleP99, res.SettleMax = percentile(settles, 0.5), percentile(settles, 0.99), settles[len(settles)-1]
		fmt.Fprintf(cfg.Progress, "bench: probe claims=%d batch=%d claim p50=%s p99=%s max=%s settle p50=%s p99=%s max=%s\n",
			res.ProbeClaims, hc.ProbeBatch, ms(res.ClaimP50), ms(res.ClaimP99), ms(res.ClaimMax),
			ms(res.SettleP50), ms(res.SettleP99), ms(res.SettleMax))
	}
	res.DBBytes, err = DBSize(ctx, s)
	return res, err
}

// Probe enqueues n tasks in queue, then claims them batch at a time and
// settles each batch as succeeded, one caller, timing every Engine.Claim
// and every Engine.Settle: the latency of the one claim path and the one
// settle path, without a worker's queueing around them. The durations
// come back sorted.
func Probe(ctx context.Context, c *backstop.Client, queue string, n, batch int) (claims, settles []time.Duration, err error) {
	if err := Enqueue(ctx, c, queue, n, 1000); err != nil {
		return nil, nil, err
	}
	e := c.Engine()
	for done := 0; done < n; {
		start := time.Now()
		tasks, bad, err := e.Claim(ctx, engine.ClaimParams{Queue: queue, WorkerID: "bench-probe", Max: batch, Lease: time.Minute})
		claims = append(claims, time.Since(start))
		if err != nil {
			return nil, nil, fmt.Errorf("bench: probe claim: %w", err)
		}
		if len(tasks) == 0 || len(bad) > 0 {
			return nil, nil, fmt.Errorf("bench: probe claim: %d tasks (%d bad) with %d of %d still to claim", len(tasks), len(bad), n-done, n)
		}
		ss := make([]store.Settlement, 0, len(tasks))
		for _, t := range tasks {
			ss = append(ss, e.Decide(engine.Report{Task: t}))
		}
		start = time.Now()
		oks, err := e.Settle(ctx, ss)
		settles = append(settles, time.Since(start))
		if err != nil {
			return nil, nil, fmt.Errorf("bench: probe settle: %w", err)
		}
		if i := slices.Index(oks, false); i >= 0 {
			return nil, nil, fmt.Errorf("bench: probe settle: task %s's lease was not current", ss[i].TaskID)
		}
		done += len(tasks)
	}
	slices.Sort(claims)
	slices.Sort(settles)
	return claims, settles, Verify(ctx, c, queue, false)
}

// FillResult counts what FillHistory wrote. Executions counts the
// failed attempts' rows; both stores keep a success's attempt in its task
// row, as their settles do.
type FillResult struct{ Rows, Executions, EventRows int }

// FillHistory writes n succeeded tasks of queue, finished over the
// retention window before now (or, expired, before the window), with their
// events, and an execution row for every retriedEvery-th (none when
// negative), on the database of the store s.
func FillHistory(ctx context.Context, s any, queue string, n, retriedEvery int, expired bool, now time.Time) (FillResult, error) {
	// Finish times: the last 23 hours, or 48 to 25 hours ago.
	from, to := now.Add(-23*time.Hour), now.Add(-time.Minute)
	if expired {
		from, to = now.Add(-2*HistoryRetention), now.Add(-HistoryRetention-time.Hour)
	}
	step := to.Sub(from) / time.Duration(max(n, 1))
	var b [3]byte
	_, _ = rand.Read(b[:])
	// 00xxxxxx-...: before every UUIDv7 the engine makes today.
	prefix := "00" + hex.EncodeToString(b[:])
	if retriedEvery < 0 {
		retriedEvery = n + 1
	}
	res := FillResult{Rows: n}
	var fill func(lo, hi int) error
	fillers := 1
	switch s := s.(type) {
	case pooled:
		fill = func(lo, hi int) error {
			return fillPostgres(ctx, s.Pool(), queue, prefix, lo, hi, retriedEvery, from, step)
		}
		fillers = historyFillers
	case sqlDB:
		fill = func(lo, hi int) error {
			return fillSQLite(ctx, s.DB(), queue, prefix, lo, hi, retriedEvery, from, step)
		}
	default:
		return res, fmt.Errorf("bench: history: store %T is neither Postgres nor SQLite", s)
	}
	chunks := make(chan int)
	errs := make([]error, fillers)
	var wg sync.WaitGroup
	for f := range fillers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lo := range chunks {
				if errs[f] != nil {
					continue
				}
				hi := min(lo+historyChunk, n)
				if err := fill(lo, hi); err != nil {
					errs[f] = fmt.Errorf("bench: history fill rows %d-%d: %w", lo, hi, err)
				}
			}
		}()
	}
	for lo := 0; lo < n; lo += historyChunk {
		hi := min(lo+historyChunk, n)
		chunks <- lo
		res.Executions += (hi-1)/retriedEvery - (max(lo, 1)-1)/retriedEvery // i = 0 is not retried
		res.EventRows += 4 * ((hi - lo + historyGroup - 1) / historyGroup)
	}
	close(chunks)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	if p, ok := s.(pooled); ok {
		// As autovacuum would have by the time a real history is this
		// large (and so that it does not start during the drain): the
		// visibility map set, the planner's statistics current.
		if _, err := p.Pool().Exec(ctx, `VACUUM (ANALYZE) backstop_tasks, backstop_executions, backstop_events`); err != nil {
			return res, fmt.Errorf("bench: history: vacuum: %w", err)
		}
	}
	return res, nil
}

// sqlFillPostgres writes tasks $3..$4-1 with their failed executions and
// their event rows. $1 queue, $2 id prefix, $5 every n-th retried, $6 the
// first finish time, $7 microseconds between finishes, $8 the link numbers
// (three per group of 1,000: enqueue, claim, settle).
const sqlFillPostgres = `
WITH g AS (
	SELECT i, (i - $3) / 1000 AS grp,
		$6::timestamptz + (i * $7::bigint) * interval '1 microsecond' AS f,
		$2 || '-0000-7000-8000-' || lpad(to_hex(i), 12, '0') AS id,
		$2 || '-0000-7000-9000-' || lpad(to_hex(i), 12, '0') AS ex,
		i > 0 AND i % $5 = 0 AS retried
	FROM generate_series($3::bigint, $4::bigint - 1) i
), tasks AS (
	INSERT INTO backstop_tasks (id, queue, kind, state, attempt, max_attempts, payload, payload_size,
		run_at, created_at, updated_at, worker_id, execution_id, attempted_at, finalized_at, event_links)
	SELECT id, $1, 'noop', 'succeeded', CASE WHEN retried THEN 2 ELSE 1 END, 25, '{}', 2,
		f - interval '20 ms', f - interval '20 ms', f, 'bench-history', ex, f - interval '2 ms', f,
		ARRAY[($8::bigint[])[grp * 3 + 1], ($8::bigint[])[grp * 3 + 2], ($8::bigint[])[grp * 3 + 3]]
	FROM g
), execs AS (
	INSERT INTO backstop_executions (execution_id, task_id, attempt, worker_id, started_at, finished_at, outcome, error)
	SELECT $2 || '-0000-7000-a000-' || lpad(to_hex(i), 12, '0'), id, 1, 'bench-history',
		f - interval '2 s', f - interval '1 s', 'transient_error', 'bench: history'
	FROM g WHERE retried
)
INSERT INTO backstop_events (time, type, subjects, queues, kinds, attributes, bodies, times, link, common)
SELECT max(g.f), ty.type, array_agg(g.id ORDER BY g.i), array_agg($1::text), array_agg('noop'::text),
	json_agg(NULL::json),
	json_agg(CASE ty.type
		WHEN 'task.enqueued' THEN json_build_object('merged', false, 'duplicate', false, 'state', 'pending',
			'run_at', g.f - interval '20 ms', 'priority', 0, 'max_attempts', 25)
		WHEN 'task.claimed' THEN json_build_object('execution_id', g.ex, 'attempt', 1)
		WHEN 'task.started' THEN json_build_object('execution_id', g.ex, 'attempt', 1, 'worker_id', 'bench-history')
		ELSE json_build_object('execution_id', g.ex, 'attempt', 1, 'duration_ms', 2) END ORDER BY g.i),
	CASE WHEN ty.type = 'task.claimed' THEN NULL ELSE array_agg(g.f ORDER BY g.i) END,
	($8::bigint[])[g.grp * 3 + ty.k],
	CASE WHEN ty.type = 'task.claimed' THEN json_build_object('worker_id', 'bench-history',
		'lease_expires_at', max(g.f) + interval '30 s') END
FROM g CROSS JOIN (VALUES ('task.enqueued', 1), ('task.claimed', 2), ('task.started', 3), ('task.succeeded', 3)) ty(type, k)
GROUP BY g.grp, ty.type, ty.k`

func fillPostgres(ctx context.Context, pool *pgxpool.Pool, queue, prefix string, lo, hi, retriedEvery int, from time.Time, step time.Duration) error {
	groups := (hi - lo + historyGroup - 1) / historyGroup
	rows, err := pool.Query(ctx, `SELECT nextval('backstop_events_seq_seq') FROM generate_series(1, $1)`, 3*groups)
	if err != nil {
		return err
	}
	links := make([]int64, 0, 3*groups)
	for rows.Next() {
		var l int64
		if err := rows.Scan(&l); err != nil {
			rows.Close()
			return err
		}
		links = append(links, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	_, err = pool.Exec(ctx, sqlFillPostgres, queue, prefix, lo, hi, retriedEvery, from, step.Microseconds(), links)
	return err
}

// sqlFillSQLite is sqlFillPostgres for SQLite, in three statements of one
// transaction: ?1 queue, ?2 id prefix, ?3 first and ?4 last+1 task, ?5
// every n-th retried, ?6 the first finish time and ?7 the step
// (microseconds), ?8 the first event seq to use (four per group: the
// tasks' event_seqs name them).
const sqlFillSQLiteG = `WITH RECURSIVE s(i) AS (SELECT ?3 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < ?4),
g AS (SELECT i, (i - ?3) / 1000 AS grp, ?6 + i * ?7 AS f,
	?2 || '-0000-7000-8000-' || printf('%012x', i) AS id,
	?2 || '-0000-7000-9000-' || printf('%012x', i) AS ex,
	i > 0 AND i % ?5 = 0 AS retried FROM s)`

var sqlFillSQLite = []string{
	sqlFillSQLiteG + `
INSERT INTO backstop_tasks (id, queue, kind, state, attempt, max_attempts, payload, payload_size,
	run_at, created_at, updated_at, worker_id, execution_id, attempted_at, finalized_at, event_seqs)
SELECT id, ?1, 'noop', 'succeeded', CASE WHEN retried THEN 2 ELSE 1 END, 25, '{}', 2,
	f - 20000, f - 20000, f, 'bench-history', ex, f - 2000, f,
	',' || (?8 + grp * 4) || ',' || (?8 + grp * 4 + 1) || ',' || (?8 + grp * 4 + 2) || ',' || (?8 + grp * 4 + 3)
FROM g`,
	sqlFillSQLiteG + `
INSERT INTO backstop_executions (task_id, execution_id, attempt, worker_id, started_at, finished_at, outcome, error)
SELECT id, ?2 || '-0000-7000-a000-' || printf('%012x', i), 1, 'bench-history', f - 2000000, f - 1000000,
	'transient_error', 'bench: history'
FROM g WHERE retried`,
	sqlFillSQLiteG + `
INSERT INTO backstop_events (seq, type, time, subjects, queues, kinds, times, attributes, bodies)
SELECT ?8 + g.grp * 4 + ty.k, ty.type, max(g.f), json_group_array(g.id), json_group_array(?1), json_group_array('noop'),
	CASE WHEN ty.type = 'task.claimed' THEN NULL ELSE json_group_array(g.f) END,
	json_group_array(NULL),
	json_group_array(json(CASE ty.type
		WHEN 'task.enqueued' THEN json_object('merged', json('false'), 'duplicate', json('false'), 'state', 'pending',
			'run_at', g.f - 20000, 'priority', 0, 'max_attempts', 25)
		WHEN 'task.claimed' THEN json_object('execution_id', g.ex, 'attempt', 1, 'worker_id', 'bench-history')
		WHEN 'task.started' THEN json_object('execution_id', g.ex, 'attempt', 1, 'worker_id', 'bench-history')
		ELSE json_object('execution_id', g.ex, 'attempt', 1, 'duration_ms', 2) END))
FROM g CROSS JOIN (SELECT 'task.enqueued' AS type, 0 AS k UNION ALL SELECT 'task.claimed', 1
	UNION ALL SELECT 'task.started', 2 UNION ALL SELECT 'task.succeeded', 3) ty
GROUP BY g.grp, ty.type, ty.k ORDER BY 1`,
}

func fillSQLite(ctx context.Context, db *sql.DB, queue, prefix string, lo, hi, retriedEvery int, from time.Time, step time.Duration) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck
	var seq int64
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) + 1 FROM backstop_events`).Scan(&seq); err != nil {
		return err
	}
	for _, q := range sqlFillSQLite {
		if _, err := tx.ExecContext(ctx, q, queue, prefix, lo, hi, retriedEvery, from.UnixMicro(), step.Microseconds(), seq); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// DBSize is the size of the database of the store s: Postgres'
// pg_database_size, SQLite's pages in use and free.
func DBSize(ctx context.Context, s any) (int64, error) {
	var n int64
	var err error
	switch s := s.(type) {
	case pooled:
		err = s.Pool().QueryRow(ctx, `SELECT pg_database_size(current_database())`).Scan(&n)
	case sqlDB:
		err = s.DB().QueryRowContext(ctx, `SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()`).Scan(&n)
	default:
		return 0, fmt.Errorf("bench: store %T is neither Postgres nor SQLite", s)
	}
	return n, err
}
