package bench_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/bench"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
)

// TestHoldSnapshot: the holder's session shows a backend_xmin in
// pg_stat_activity that stays put while other sessions commit, VACUUM
// leaves the row versions deleted meanwhile as "dead but not yet
// removable", and after Release the session is gone. (Whether VACUUM then
// removes them depends on every other session of the shared test database,
// so it is not asserted.)
func TestHoldSnapshot(t *testing.T) {
	ctx := context.Background()
	c := client(t, testdb.Postgres(t))
	pool := c.Store().(interface{ Pool() *pgxpool.Pool }).Pool()
	if _, err := c.EnqueueMany(ctx, []backstop.EnqueueParams{{Queue: "q", Kind: "k"}, {Queue: "q", Kind: "k"}}); err != nil {
		t.Fatal(err)
	}
	h, err := bench.HoldSnapshot(ctx, pool, "q")
	if err != nil {
		t.Fatal(err)
	}
	released := false
	defer func() {
		if !released {
			_ = h.Release(ctx)
		}
	}()
	xmin, age, err := h.Xmin(ctx, pool)
	if err != nil || xmin == "" {
		t.Fatalf("xmin %q, %v", xmin, err)
	}
	// Other sessions commit: each takes a transaction id.
	for range 3 {
		if _, err := pool.Exec(ctx, `DELETE FROM backstop_tasks WHERE id = (SELECT id FROM backstop_tasks WHERE queue = 'q' LIMIT 1)`); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "q", Kind: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	xmin2, age2, err := h.Xmin(ctx, pool)
	if err != nil || xmin2 != xmin || age2 <= age {
		t.Fatalf("backend_xmin %s (age %d) then %s (age %d), %v: want it held and older", xmin, age, xmin2, age2, err)
	}
	if err := h.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if n := vacuumNotRemovable(t, pool); n < 3 {
		t.Fatalf("VACUUM: %d dead but not yet removable, want at least the 3 deleted rows", n)
	}

	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released = true
	// The session ends after its connection closes, a moment later.
	testwait.For(t, "the holder's session to end", func() bool {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, h.PID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
}

// vacuumNotRemovable runs VACUUM (VERBOSE) on backstop_tasks and returns
// the count of row versions it reports dead but not yet removable.
func vacuumNotRemovable(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	ctx := context.Background()
	cfg := pool.Config().ConnConfig.Copy()
	var (
		mu      sync.Mutex
		notices []string
	)
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		notices = append(notices, n.Message)
		mu.Unlock()
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `VACUUM (VERBOSE) backstop_tasks`); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, m := range notices {
		// "tuples: R removed, N remain, D are dead but not yet removable"
		for _, l := range strings.Split(m, "\n") {
			var removed, remain, dead int
			if i := strings.Index(l, "tuples: "); i >= 0 {
				if _, err := fmt.Sscanf(l[i:], "tuples: %d removed, %d remain, %d are dead but not yet removable", &removed, &remain, &dead); err == nil {
					return dead
				}
			}
		}
	}
	t.Fatalf("VACUUM (VERBOSE) reported no tuple counts: %q", notices)
	return 0
}
