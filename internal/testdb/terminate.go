package testdb

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TerminateWaiters makes the next writes to table (in the test's schema of
// the database at url) lose their connection, as a server restart or a
// network cut would: it holds a SHARE lock on the table (reads go on,
// writes wait), terminates with pg_terminate_backend each client backend
// that waits for that lock, up to n of them, then lets the table go. It
// returns once the lock is held; the returned channel receives the
// number terminated when it let go (after n, or after 30s).
func TerminateWaiters(t testing.TB, url, table string, n int) <-chan int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("testdb: connect: %v", err)
	}
	tx, err := conn.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{table}.Sanitize()+" IN SHARE MODE")
	}
	if err != nil {
		conn.Close(ctx)
		t.Fatalf("testdb: lock %s: %v", table, err)
	}
	done := make(chan int, 1)
	go func() {
		defer conn.Close(ctx)
		killed := 0
		for deadline := time.Now().Add(30 * time.Second); killed < n && time.Now().Before(deadline); {
			// pg_locks, not pg_stat_activity: that view is a snapshot
			// taken once per transaction, and this one stays open.
			rows, err := conn.Query(ctx, `SELECT pid FROM pg_locks
				WHERE relation = to_regclass($1::text) AND NOT granted AND pid <> pg_backend_pid()`, table)
			if err != nil {
				break
			}
			pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
			if err != nil {
				break
			}
			for _, pid := range pids {
				if killed < n {
					if _, err := conn.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err == nil {
						killed++
					}
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		if killed < n {
			t.Logf("testdb: terminated %d of %d waiters on %s in 30s", killed, n, table)
		}
		_ = tx.Rollback(ctx)
		done <- killed
	}()
	return done
}
