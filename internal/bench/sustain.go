package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store/pgstore"
)

// Sustained drain: a worker drains for a fixed time while producers keep a
// backlog waiting, and the throughput is reported per interval, so a run
// shows whether the drain holds up over minutes rather than one figure for
// the whole. On Postgres it can run behind an open snapshot: another
// session holds a REPEATABLE READ transaction open for the whole run, so
// the xmin horizon stays where it was and no row version the run makes
// dead can be removed (neither by vacuum nor by index-entry killing).

// SustainConfig sizes a sustained run. Zero values take the defaults named.
type SustainConfig struct {
	// Duration of the drain. Default: 10 minutes.
	Duration time.Duration
	// Interval between report lines. Default: 1 minute.
	Interval time.Duration
	// Workers is the worker's concurrency. Default: 2000.
	Workers int
	// Batch is the size of each EnqueueMany. Default: 1,000.
	Batch int
	// Backlog is how many tasks the producers keep waiting (enqueued, not
	// yet handled), so the worker never starves. Default: 20,000.
	Backlog int
	// Producers enqueue at once. Default: 2.
	Producers int
	// HoldSnapshot (Postgres): a separate session holds a REPEATABLE READ
	// transaction, opened before the run and ended after it.
	HoldSnapshot bool
	// Explain (Postgres): print EXPLAIN (ANALYZE, BUFFERS) of the claim's
	// pick before the worker starts and after it stopped (the snapshot,
	// if held, still open).
	Explain bool
	// Queue to use. Default: a fresh private name.
	Queue string
	// Out receives the report lines. Default: none.
	Out io.Writer
}

func (c SustainConfig) withDefaults() SustainConfig {
	if c.Duration <= 0 {
		c.Duration = 10 * time.Minute
	}
	if c.Interval <= 0 {
		c.Interval = time.Minute
	}
	if c.Workers <= 0 {
		c.Workers = 2000
	}
	if c.Batch <= 0 {
		c.Batch = 1000
	}
	if c.Backlog <= 0 {
		c.Backlog = 20_000
	}
	if c.Producers <= 0 {
		c.Producers = 2
	}
	if c.Queue == "" {
		c.Queue = NewQueueName()
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	return c
}

// SustainInterval is one report interval of a sustained run.
type SustainInterval struct {
	Index      int           // 1-based
	Length     time.Duration // the interval's wall time
	Worked     int           // tasks handled in it
	Enqueued   int           // tasks enqueued in it
	BacklogMin int           // the smallest backlog sampled in it (0: the worker may have starved)
	// Postgres only (-1 elsewhere): dead row versions in backstop_tasks
	// and in all tables of the store's schema (pg_stat_user_tables, which
	// lags by up to a second or so), and the age in transactions of the
	// holder's backend_xmin (-1: no holder).
	DeadTasks, DeadAll int64
	XminAge            int64
}

// PerSec is the interval's throughput.
func (i SustainInterval) PerSec() float64 { return perSec(i.Worked, i.Length) }

// SustainResult is what a sustained run measured.
type SustainResult struct {
	Store     string
	Queue     string
	Held      bool
	Worked    int
	Elapsed   time.Duration
	Intervals []SustainInterval
	// HolderXmin is the holder's backend_xmin when the run started and
	// when it ended (equal: the horizon was held all along).
	HolderXminStart, HolderXminEnd string
}

// LastOverFirst is the last interval's throughput over the first's.
func (r *SustainResult) LastOverFirst() float64 {
	if len(r.Intervals) == 0 || r.Intervals[0].PerSec() == 0 {
		return 0
	}
	return r.Intervals[len(r.Intervals)-1].PerSec() / r.Intervals[0].PerSec()
}

// Summary is the last line of `backstop bench sustain`; scripts parse it.
func (r *SustainResult) Summary() string {
	var first, last float64
	if n := len(r.Intervals); n > 0 {
		first, last = r.Intervals[0].PerSec(), r.Intervals[n-1].PerSec()
	}
	return fmt.Sprintf("sustain: store=%s held_snapshot=%t worked=%d elapsed=%.1fs jobs_per_sec=%.1f first=%.1f last=%.1f last_over_first=%.2f",
		r.Store, r.Held, r.Worked, r.Elapsed.Seconds(), perSec(r.Worked, r.Elapsed), first, last, r.LastOverFirst())
}

// Sustain runs a sustained drain on the store of c (s is c's store: a
// Postgres store for HoldSnapshot and Explain).
func Sustain(ctx context.Context, c *backstop.Client, s any, cfg SustainConfig) (res *SustainResult, err error) {
	cfg = cfg.withDefaults()
	res = &SustainResult{Store: c.Store().Driver(), Queue: cfg.Queue, Held: cfg.HoldSnapshot}
	var pool *pgxpool.Pool
	if p, ok := s.(pooled); ok {
		pool = p.Pool()
	} else if cfg.HoldSnapshot || cfg.Explain {
		return nil, fmt.Errorf("bench sustain: --hold-snapshot and --explain need a Postgres store, not %s", res.Store)
	}

	var holder *SnapshotHolder
	if cfg.HoldSnapshot {
		if holder, err = HoldSnapshot(ctx, pool, cfg.Queue); err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, holder.Release(context.WithoutCancel(ctx))) }()
		if res.HolderXminStart, _, err = holder.Xmin(ctx, pool); err != nil {
			return nil, err
		}
		fmt.Fprintf(cfg.Out, "sustain: snapshot held by pid %d, backend_xmin=%s\n", holder.PID, res.HolderXminStart)
	}

	var handled, enqueued atomic.Int64
	w, err := newWorker(c, cfg.Queue, cfg.Workers, func() { handled.Add(1) })
	if err != nil {
		return nil, err
	}
	// Fill the backlog before the clock starts.
	if err := Enqueue(ctx, c, cfg.Queue, cfg.Backlog, cfg.Batch); err != nil {
		return nil, err
	}
	enqueued.Store(int64(cfg.Backlog))
	fmt.Fprintf(cfg.Out, "sustain: store=%s queue=%s duration=%s interval=%s workers=%d backlog=%d producers=%d batch=%d\n",
		res.Store, cfg.Queue, cfg.Duration, cfg.Interval, cfg.Workers, cfg.Backlog, cfg.Producers, cfg.Batch)
	if cfg.Explain {
		if err := explainPick(ctx, pool, cfg.Queue, cfg.Batch, "start", cfg.Out); err != nil {
			return nil, err
		}
	}

	pctx, stopProducers := context.WithCancel(ctx)
	defer stopProducers()
	start := time.Now()
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	var (
		wg      sync.WaitGroup
		prodErr = make([]error, cfg.Producers)
	)
	for p := range cfg.Producers {
		wg.Go(func() {
			for pctx.Err() == nil {
				if enqueued.Load()-handled.Load() >= int64(cfg.Backlog) {
					time.Sleep(2 * time.Millisecond)
					continue
				}
				if err := Enqueue(pctx, c, cfg.Queue, cfg.Batch, cfg.Batch); err != nil {
					if pctx.Err() == nil {
						prodErr[p] = err
					}
					return
				}
				enqueued.Add(int64(cfg.Batch))
			}
		})
	}

	runErr := func() error {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		end := start.Add(cfg.Duration)
		ivStart, ivHandled, ivEnqueued := start, int64(0), enqueued.Load()
		backlogMin := int64(cfg.Backlog)
		for len(res.Intervals) == 0 || time.Now().Before(end) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
			h, e := handled.Load(), enqueued.Load()
			backlogMin = min(backlogMin, e-h)
			now := time.Now()
			if now.Sub(ivStart) < cfg.Interval && now.Before(end) {
				continue
			}
			iv := SustainInterval{Index: len(res.Intervals) + 1, Length: now.Sub(ivStart),
				Worked: int(h - ivHandled), Enqueued: int(e - ivEnqueued), BacklogMin: int(max(backlogMin, 0)),
				DeadTasks: -1, DeadAll: -1, XminAge: -1}
			if pool != nil {
				if err := pool.QueryRow(ctx, `SELECT
	coalesce((SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'backstop_tasks'::regclass), 0),
	coalesce((SELECT sum(n_dead_tup) FROM pg_stat_user_tables WHERE schemaname = current_schema()), 0)::bigint`).
					Scan(&iv.DeadTasks, &iv.DeadAll); err != nil {
					return fmt.Errorf("bench sustain: dead tuples: %w", err)
				}
			}
			if holder != nil {
				var err error
				if _, iv.XminAge, err = holder.Xmin(ctx, pool); err != nil {
					return err
				}
			}
			res.Intervals = append(res.Intervals, iv)
			fmt.Fprintln(cfg.Out, iv.String())
			ivStart, ivHandled, ivEnqueued, backlogMin = now, h, e, e-h
			if len(prodErr) > 0 {
				if err := errors.Join(prodErr...); err != nil {
					return err
				}
			}
		}
		return nil
	}()
	stopProducers()
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Worked = int(handled.Load())
	if err := errors.Join(runErr, errors.Join(prodErr...), stopWorker(w)); err != nil {
		return res, err
	}
	if cfg.Explain {
		if err := explainPick(ctx, pool, cfg.Queue, cfg.Batch, "end", cfg.Out); err != nil {
			return res, err
		}
		// The pick the worker's claims ran most of the time: from where
		// they ended (the store's claim cursor).
		if cs, ok := s.(claimCursors); ok {
			if prio, runAt, id, ok := cs.ClaimCursor(cfg.Queue); ok {
				if err := explainPick(ctx, pool, cfg.Queue, cfg.Batch, "end, from the claim cursor", cfg.Out,
					prio, runAt, id); err != nil {
					return res, err
				}
			}
		}
	}
	if holder != nil {
		if res.HolderXminEnd, _, err = holder.Xmin(ctx, pool); err != nil {
			return res, err
		}
		if err := holder.Check(ctx); err != nil {
			return res, err
		}
		if res.HolderXminEnd != res.HolderXminStart {
			return res, fmt.Errorf("bench sustain: the holder's backend_xmin moved from %s to %s: the snapshot was not held",
				res.HolderXminStart, res.HolderXminEnd)
		}
		fmt.Fprintf(cfg.Out, "sustain: snapshot still held at the end, backend_xmin=%s\n", res.HolderXminEnd)
	}
	return res, Verify(ctx, c, cfg.Queue, true)
}

func (i SustainInterval) String() string {
	s := fmt.Sprintf("sustain: interval=%d length=%.1fs worked=%d jobs_per_sec=%.1f enqueued=%d backlog_min=%d",
		i.Index, i.Length.Seconds(), i.Worked, i.PerSec(), i.Enqueued, i.BacklogMin)
	if i.DeadTasks >= 0 {
		s += fmt.Sprintf(" dead_tasks=%d dead_all=%d", i.DeadTasks, i.DeadAll)
	}
	if i.XminAge >= 0 {
		s += fmt.Sprintf(" xmin_age=%d", i.XminAge)
	}
	return s
}

// SnapshotHolder is a session holding a REPEATABLE READ transaction open:
// its snapshot keeps the database's xmin horizon where it was.
type SnapshotHolder struct {
	PID  uint32
	conn *pgx.Conn
	tx   pgx.Tx
}

// HoldSnapshot opens a connection of its own (the pool's settings, search
// path included), begins a REPEATABLE READ transaction and takes its
// snapshot by reading backstop_tasks; the transaction stays open until
// Release.
func HoldSnapshot(ctx context.Context, pool *pgxpool.Pool, queue string) (*SnapshotHolder, error) {
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("bench: snapshot holder: connect: %w", err)
	}
	h := &SnapshotHolder{conn: conn}
	h.tx, err = conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err == nil {
		err = h.tx.QueryRow(ctx, `SELECT pg_backend_pid(), (SELECT count(*) FROM backstop_tasks WHERE queue = $1)`, queue).
			Scan(&h.PID, new(int64))
	}
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("bench: snapshot holder: %w", err)
	}
	return h, nil
}

// Xmin is the holder's backend_xmin as pg_stat_activity shows it (read on
// pool, another session), and its age in transactions.
func (h *SnapshotHolder) Xmin(ctx context.Context, pool *pgxpool.Pool) (string, int64, error) {
	var (
		xmin *string
		age  *int64
	)
	if err := pool.QueryRow(ctx, `SELECT backend_xmin::text, age(backend_xmin)::bigint FROM pg_stat_activity WHERE pid = $1`, h.PID).
		Scan(&xmin, &age); err != nil {
		return "", 0, fmt.Errorf("bench: snapshot holder pid %d: %w", h.PID, err)
	}
	if xmin == nil || age == nil {
		return "", 0, fmt.Errorf("bench: snapshot holder pid %d holds no xmin", h.PID)
	}
	return *xmin, *age, nil
}

// Check runs a statement in the held transaction: it fails if the session
// or its transaction ended.
func (h *SnapshotHolder) Check(ctx context.Context) error {
	if _, err := h.tx.Exec(ctx, `SELECT 1`); err != nil {
		return fmt.Errorf("bench: snapshot holder: the held transaction ended: %w", err)
	}
	return nil
}

// Release ends the transaction and closes the session.
func (h *SnapshotHolder) Release(ctx context.Context) error {
	err := h.tx.Rollback(ctx)
	return errors.Join(err, h.conn.Close(ctx))
}

// claimCursors is a store whose claims remember where they ended
// (pgstore.Store.ClaimCursor).
type claimCursors interface {
	ClaimCursor(queue string, kinds ...string) (priority int, runAt time.Time, id string, ok bool)
}

// explainPick prints EXPLAIN (ANALYZE, BUFFERS) of the claim's pick on
// queue, in a transaction rolled back afterwards: from the head of the
// claim index, or with a cursor position (priority, run_at, id) from there.
func explainPick(ctx context.Context, pool *pgxpool.Pool, queue string, batch int, label string, out io.Writer, cursor ...any) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("bench sustain: explain: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	pick := pgstore.ClaimPickSQL()
	if len(cursor) > 0 {
		pick = pgstore.ClaimCursorPickSQL()
	}
	rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) `+pick, append([]any{queue, time.Now(), batch}, cursor...)...)
	if err != nil {
		return fmt.Errorf("bench sustain: explain: %w", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("bench sustain: explain: %w", err)
	}
	fmt.Fprintf(out, "sustain: explain %s:\n  %s\n", label, strings.Join(lines, "\n  "))
	return nil
}
