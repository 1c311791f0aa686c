package pgstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Warm opens up to n of the pool's connections side by side (at most its
// MaxConns) and runs on each a claim of queue that takes nothing (the pick
// from the head with LIMIT 0: no row locked, nothing written), prepared as
// the claims prepare it (freshPlan). A new
// connection costs a backend's start and, in that backend, the first plan
// of each statement reads the catalog (10-15 ms for the claim); a worker
// warms its pool at Start (store.Warmer) so that its first claims, and the
// settles and enqueues on the same connections, do not pay that while
// tasks wait (docs/benchmarks.md, "The pickup's bursts of slow claims").
func (s *Store) Warm(ctx context.Context, queue string, n int) error {
	n = min(n, int(s.pool.Config().MaxConns))
	if n <= 0 {
		return nil
	}
	conns := make([]*pgxpool.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	now := time.Now()
	for i := range n {
		wg.Go(func() {
			// Every connection is held until all are acquired, so the
			// pool opens n of them.
			c, err := s.pool.Acquire(ctx)
			if err != nil {
				errs[i] = err
				return
			}
			conns[i] = c
			sql := s.hot(sqlClaim)
			if err := s.freshPlan(ctx, c.Conn(), sql); err != nil {
				errs[i] = err
				return
			}
			rs, err := c.Query(ctx, sql, queue, now, 0, "warm", now)
			if err == nil {
				rs.Close()
				err = rs.Err()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, c := range conns {
		if c != nil {
			c.Release()
		}
	}
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("pgstore: warm: %w", err)
		}
	}
	return nil
}
