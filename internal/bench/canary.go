package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// canaryEvery is how often the canary commits.
const canaryEvery = 20 * time.Millisecond

// canary is the server's own commit floor beside a latency run: on a
// connection of its own to the store's database (Postgres), every
// canaryEvery a one-row INSERT into a table of its own, committed with
// the server's durable settings, timed. A pickup figure whose p99 sits at
// the canary's was the server's flush, not Backstop's claim (the pickup
// sections of docs/benchmarks.md).
type canary struct {
	conn  *pgx.Conn
	table string
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	lat   []time.Duration
	err   error
}

// CanaryResult is what the canary measured: its commits and their
// latency (each INSERT's round trip, its COMMIT's flush included).
type CanaryResult struct {
	Commits       int
	P50, P99, Max time.Duration
}

func (r *CanaryResult) String() string {
	return fmt.Sprintf("bench: canary commit p50=%s p99=%s max=%s commits=%d (a one-row INSERT every %s on a connection of its own: the server's commit floor)",
		ms(r.P50), ms(r.P99), ms(r.Max), r.Commits, canaryEvery)
}

// startCanary starts the canary on the Postgres store of pool (nil: not
// Postgres, no canary): its table, bench_canary_<the queue's suffix>, is
// made in the pool's schema and dropped by stop.
func startCanary(ctx context.Context, s any, queue string) (*canary, error) {
	p, ok := s.(pooled)
	if !ok {
		return nil, nil
	}
	conn, err := pgx.ConnectConfig(ctx, p.Pool().Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("bench: canary: connect: %w", err)
	}
	k := &canary{conn: conn, stop: make(chan struct{}), done: make(chan struct{}),
		table: pgx.Identifier{"bench_canary_" + strings.NewReplacer("-", "_").Replace(strings.TrimPrefix(queue, "bench-"))}.Sanitize()}
	if _, err := conn.Exec(ctx, `CREATE TABLE `+k.table+` (at timestamptz NOT NULL DEFAULT now())`); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("bench: canary: %w", err)
	}
	go k.run(ctx)
	return k, nil
}

func (k *canary) run(ctx context.Context) {
	defer close(k.done)
	tick := time.NewTicker(canaryEvery)
	defer tick.Stop()
	insert := `INSERT INTO ` + k.table + ` DEFAULT VALUES`
	for {
		select {
		case <-k.stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		t0 := time.Now()
		_, err := k.conn.Exec(ctx, insert)
		d := time.Since(t0)
		k.mu.Lock()
		if err != nil {
			k.err = err
			k.mu.Unlock()
			return
		}
		k.lat = append(k.lat, d)
		k.mu.Unlock()
	}
}

// finish stops the canary, drops its table and closes its connection.
func (k *canary) finish(ctx context.Context) (*CanaryResult, error) {
	close(k.stop)
	<-k.done
	ctx = context.WithoutCancel(ctx)
	_, derr := k.conn.Exec(ctx, `DROP TABLE IF EXISTS `+k.table)
	cerr := k.conn.Close(ctx)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := firstErr(k.err, derr, cerr); err != nil {
		return nil, fmt.Errorf("bench: canary: %w", err)
	}
	r := &CanaryResult{Commits: len(k.lat)}
	if len(k.lat) > 0 {
		slices.Sort(k.lat)
		r.P50, r.P99, r.Max = percentile(k.lat, 0.50), percentile(k.lat, 0.99), k.lat[len(k.lat)-1]
	}
	return r, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
