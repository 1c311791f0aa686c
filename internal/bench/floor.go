package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop"
)

// The floors: what the same database does for the same work with nothing
// of Backstop's around it, so that Backstop's figures can be read as a
// fraction of what the database allows. Each floor runs on a minimal table
// of its own (Postgres: in a schema of its own; SQLite: a table in the
// same file), created for the run and dropped after it:
//
//   - drain: claim a batch of pending rows (Postgres: FOR UPDATE SKIP
//     LOCKED, several claimers), then mark the batch done with one UPDATE;
//     no events, no attempt history, no leases to check.
//   - enqueue: insert the same rows Backstop's batch enqueue inserts
//     (Postgres: COPY; SQLite: one prepared INSERT per row, a transaction
//     per batch).

// FloorConfig sizes a floor run. Zero values take the defaults named.
type FloorConfig struct {
	// N rows to insert, then drain. Default: 100,000.
	N int
	// Batch is the rows per claim (and per complete), and per enqueue
	// transaction on SQLite. Default: 1,000.
	Batch int
	// Claimers claim at once on Postgres (SQLite has one writer).
	// Default: 4.
	Claimers int
	// Payload of every row (a JSON object), and of Backstop's tasks in
	// CompareFloor. Default: none ({}).
	Payload json.RawMessage
}

func (c FloorConfig) withDefaults() FloorConfig {
	if c.N <= 0 {
		c.N = 100_000
	}
	if c.Batch <= 0 {
		c.Batch = 1000
	}
	if c.Claimers <= 0 {
		c.Claimers = 4
	}
	if len(c.Payload) == 0 {
		c.Payload = json.RawMessage(`{}`)
	}
	return c
}

// FloorResult is one floor run.
type FloorResult struct {
	Store           string // postgres or sqlite
	Name            string // the schema (Postgres) or table (SQLite) the run used and dropped
	N               int
	Enqueue, Drain  time.Duration
	EnqueueHow      string // copy or insert
	DrainStatements int    // claims and completes run
}

// EnqueuePerSec and DrainPerSec are the floor's rates.
func (r FloorResult) EnqueuePerSec() float64 { return perSec(r.N, r.Enqueue) }
func (r FloorResult) DrainPerSec() float64   { return perSec(r.N, r.Drain) }

func perSec(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// pooled is a Postgres store (pgstore.Store); sqlDB a SQLite one
// (sqlitestore.Store): the floors run on the store's own connections.
type (
	pooled interface{ Pool() *pgxpool.Pool }
	sqlDB  interface{ DB() *sql.DB }
)

// Floor runs the enqueue floor, then the drain floor, on the database of
// the store s (a Postgres or SQLite store), on a table of its own.
func Floor(ctx context.Context, s any, cfg FloorConfig) (FloorResult, error) {
	cfg = cfg.withDefaults()
	if err := CheckPayload(cfg.Payload); err != nil {
		return FloorResult{}, err
	}
	switch s := s.(type) {
	case pooled:
		return floorPostgres(ctx, s.Pool(), cfg)
	case sqlDB:
		return floorSQLite(ctx, s.DB(), cfg)
	}
	return FloorResult{}, fmt.Errorf("bench floor: store %T is neither Postgres nor SQLite", s)
}

// floorName is a schema (Postgres) or table (SQLite) no other run uses.
func floorName() string {
	return "backstop_floor_" + strings.ReplaceAll(strings.TrimPrefix(NewQueueName(), "bench-"), "-", "_")
}

func floorPostgres(ctx context.Context, pool *pgxpool.Pool, cfg FloorConfig) (res FloorResult, err error) {
	schema := floorName()
	res = FloorResult{Store: "postgres", Name: schema, N: cfg.N, EnqueueHow: "copy"}
	tbl := pgx.Identifier{schema, "tasks"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()+`;
CREATE TABLE `+tbl+` (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	queue text NOT NULL,
	kind text NOT NULL,
	state text NOT NULL DEFAULT 'pending',
	priority int NOT NULL DEFAULT 0,
	run_at timestamptz NOT NULL,
	attempt int NOT NULL DEFAULT 0,
	payload jsonb,
	lease_expires_at timestamptz,
	finalized_at timestamptz
);
CREATE INDEX ON `+tbl+` (queue, priority DESC, run_at, id) WHERE state = 'pending'`); err != nil {
		return res, fmt.Errorf("bench floor: create %s: %w", schema, err)
	}
	defer func() {
		_, derr := pool.Exec(context.WithoutCancel(ctx), `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
		err = errors.Join(err, derr)
	}()

	// Enqueue: COPY the rows, a batch per COPY, as EnqueueMany gets them.
	now := time.Now()
	start := time.Now()
	rows := make([][]any, 0, cfg.Batch)
	for done := 0; done < cfg.N; {
		rows = rows[:0]
		for range min(cfg.Batch, cfg.N-done) {
			rows = append(rows, []any{"floor", "noop", now, string(cfg.Payload)})
		}
		if _, err := pool.CopyFrom(ctx, pgx.Identifier{schema, "tasks"}, []string{"queue", "kind", "run_at", "payload"},
			pgx.CopyFromRows(rows)); err != nil {
			return res, fmt.Errorf("bench floor: copy: %w", err)
		}
		done += len(rows)
	}
	res.Enqueue = time.Since(start)
	if _, err := pool.Exec(ctx, `ANALYZE `+tbl); err != nil {
		return res, fmt.Errorf("bench floor: analyze: %w", err)
	}

	// The locked ids as an array, so that the UPDATE finds each by its
	// primary key (a join with the CTE hashed the whole table: 94 ms
	// instead of 4-17 ms per claim of 1,000 at 100,000 rows).
	claim := `WITH picked AS (
	SELECT id FROM ` + tbl + `
	WHERE state = 'pending' AND queue = 'floor' AND run_at <= now()
	ORDER BY priority DESC, run_at, id
	LIMIT $1
	FOR UPDATE SKIP LOCKED
)
UPDATE ` + tbl + ` t SET state = 'running', attempt = t.attempt + 1, lease_expires_at = now() + interval '1 minute'
WHERE t.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING t.id`
	complete := `UPDATE ` + tbl + ` SET state = 'succeeded', finalized_at = now(), lease_expires_at = NULL
WHERE id = ANY($1) AND state = 'running'`
	var (
		left  atomic.Int64
		stmts atomic.Int64
	)
	left.Store(int64(cfg.N))
	errs := make([]error, cfg.Claimers)
	var wg sync.WaitGroup
	start = time.Now()
	for w := range cfg.Claimers {
		wg.Go(func() {
			ids := make([]int64, 0, cfg.Batch)
			for left.Load() > 0 {
				ids = ids[:0]
				rs, err := pool.Query(ctx, claim, cfg.Batch)
				if err == nil {
					var id int64
					_, err = pgx.ForEachRow(rs, []any{&id}, func() error { ids = append(ids, id); return nil })
				}
				if err != nil {
					errs[w] = fmt.Errorf("bench floor: claim: %w", err)
					return
				}
				if len(ids) == 0 {
					time.Sleep(time.Millisecond) // the rest are claimed by others
					continue
				}
				tag, err := pool.Exec(ctx, complete, ids)
				if err != nil {
					errs[w] = fmt.Errorf("bench floor: complete: %w", err)
					return
				}
				if tag.RowsAffected() != int64(len(ids)) {
					errs[w] = fmt.Errorf("bench floor: completed %d of %d", tag.RowsAffected(), len(ids))
					return
				}
				stmts.Add(2)
				left.Add(-int64(len(ids)))
			}
		})
	}
	wg.Wait()
	res.Drain = time.Since(start)
	res.DrainStatements = int(stmts.Load())
	return res, errors.Join(errs...)
}

func floorSQLite(ctx context.Context, db *sql.DB, cfg FloorConfig) (res FloorResult, err error) {
	tbl := floorName()
	res = FloorResult{Store: "sqlite", Name: tbl, N: cfg.N, EnqueueHow: "insert"}
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+tbl+` (
	id INTEGER PRIMARY KEY,
	queue TEXT NOT NULL,
	kind TEXT NOT NULL,
	state TEXT NOT NULL DEFAULT 'pending',
	priority INTEGER NOT NULL DEFAULT 0,
	run_at INTEGER NOT NULL,
	attempt INTEGER NOT NULL DEFAULT 0,
	payload TEXT,
	lease_expires_at INTEGER,
	finalized_at INTEGER
)`); err != nil {
		return res, fmt.Errorf("bench floor: create %s: %w", tbl, err)
	}
	defer func() {
		_, derr := db.ExecContext(context.WithoutCancel(ctx), `DROP TABLE `+tbl)
		err = errors.Join(err, derr)
	}()
	if _, err := db.ExecContext(ctx, `CREATE INDEX `+tbl+`_pending ON `+tbl+` (queue, priority DESC, run_at, id) WHERE state = 'pending'`); err != nil {
		return res, fmt.Errorf("bench floor: create index: %w", err)
	}

	now := time.Now().UnixMilli()
	start := time.Now()
	for done := 0; done < cfg.N; {
		n := min(cfg.Batch, cfg.N-done)
		if err := inTx(ctx, db, func(tx *sql.Tx) error {
			st, err := tx.PrepareContext(ctx, `INSERT INTO `+tbl+` (queue, kind, run_at, payload) VALUES ('floor', 'noop', ?, ?)`)
			if err != nil {
				return err
			}
			defer st.Close()
			for range n {
				if _, err := st.ExecContext(ctx, now, string(cfg.Payload)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return res, fmt.Errorf("bench floor: insert: %w", err)
		}
		done += n
	}
	res.Enqueue = time.Since(start)

	claim := `UPDATE ` + tbl + ` SET state = 'running', attempt = attempt + 1, lease_expires_at = ?1
WHERE id IN (SELECT id FROM ` + tbl + ` WHERE state = 'pending' AND queue = 'floor' AND run_at <= ?2
	ORDER BY priority DESC, run_at, id LIMIT ?3)
RETURNING id`
	complete := `UPDATE ` + tbl + ` SET state = 'succeeded', finalized_at = ?1, lease_expires_at = NULL
WHERE id IN (SELECT value FROM json_each(?2)) AND state = 'running'`
	start = time.Now()
	ids := make([]int64, 0, cfg.Batch)
	var list []byte
	for left := cfg.N; left > 0; {
		ids = ids[:0]
		now := time.Now().UnixMilli()
		if err := inTx(ctx, db, func(tx *sql.Tx) error {
			rs, err := tx.QueryContext(ctx, claim, now+60_000, now, cfg.Batch)
			if err != nil {
				return err
			}
			defer rs.Close()
			for rs.Next() {
				var id int64
				if err := rs.Scan(&id); err != nil {
					return err
				}
				ids = append(ids, id)
			}
			return rs.Err()
		}); err != nil {
			return res, fmt.Errorf("bench floor: claim: %w", err)
		}
		if len(ids) == 0 {
			return res, fmt.Errorf("bench floor: nothing to claim with %d left", left)
		}
		slices.Sort(ids)
		list = append(list[:0], '[')
		for i, id := range ids {
			if i > 0 {
				list = append(list, ',')
			}
			list = strconv.AppendInt(list, id, 10)
		}
		list = append(list, ']')
		r, err := db.ExecContext(ctx, complete, time.Now().UnixMilli(), string(list))
		if err != nil {
			return res, fmt.Errorf("bench floor: complete: %w", err)
		}
		if n, _ := r.RowsAffected(); n != int64(len(ids)) {
			return res, fmt.Errorf("bench floor: completed %d of %d", n, len(ids))
		}
		res.DrainStatements += 2
		left -= len(ids)
	}
	res.Drain = time.Since(start)
	return res, nil
}

func inTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}

// FloorComparison is one interleaved pair: the floor, then Backstop's own
// drain of the same number of tasks (its batch enqueue, then one worker).
type FloorComparison struct {
	Floor    FloorResult
	Backstop *Result
}

// DrainRatio and EnqueueRatio are Backstop's rate over the floor's.
func (c FloorComparison) DrainRatio() float64 {
	return ratio(c.Backstop.JobsPerSec(), c.Floor.DrainPerSec())
}
func (c FloorComparison) EnqueueRatio() float64 {
	return ratio(perSec(c.Backstop.Enqueued, c.Backstop.EnqueueElapsed), c.Floor.EnqueuePerSec())
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// CompareFloor runs the floor and Backstop's drain in turn, runs times,
// and writes a line per run and a summary (medians of the per-run ratios)
// to out. bcfg is Backstop's drain (its N is the floor's).
func CompareFloor(ctx context.Context, c *backstop.Client, s any, runs int, fcfg FloorConfig, bcfg Config, out io.Writer) ([]FloorComparison, error) {
	fcfg = fcfg.withDefaults()
	bcfg.N, bcfg.Duration, bcfg.Rate = fcfg.N, 0, 0
	if string(fcfg.Payload) != `{}` {
		bcfg.Payload = fcfg.Payload // the same rows on both sides
	}
	var all []FloorComparison
	for i := range max(runs, 1) {
		f, err := Floor(ctx, s, fcfg)
		if err != nil {
			return all, err
		}
		bcfg.Queue = "" // a fresh queue each run
		b, err := Drain(ctx, c, bcfg)
		if err != nil {
			return all, err
		}
		cmp := FloorComparison{Floor: f, Backstop: b}
		all = append(all, cmp)
		fmt.Fprintf(out, "floor: run=%d store=%s n=%d drain floor=%.0f/s backstop=%.0f/s ratio=%.2f enqueue floor(%s)=%.0f/s backstop=%.0f/s ratio=%.3f\n",
			i+1, f.Store, f.N, f.DrainPerSec(), b.JobsPerSec(), cmp.DrainRatio(),
			f.EnqueueHow, f.EnqueuePerSec(), perSec(b.Enqueued, b.EnqueueElapsed), cmp.EnqueueRatio())
	}
	fmt.Fprintln(out, FloorSummary(all))
	return all, nil
}

// FloorSummary is the last line of `backstop bench floor`: the median of
// the per-run ratios, and the runs' ratios.
func FloorSummary(all []FloorComparison) string {
	var dr, er []float64
	for _, c := range all {
		dr, er = append(dr, c.DrainRatio()), append(er, c.EnqueueRatio())
	}
	return fmt.Sprintf("floor: runs=%d drain_ratio_median=%.2f drain_ratios=%s enqueue_ratio_median=%.3f enqueue_ratios=%s",
		len(all), median(dr), floats(dr, 2), median(er), floats(er, 3))
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func floats(xs []float64, prec int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'f', prec, 64)
	}
	return strings.Join(parts, ",")
}
