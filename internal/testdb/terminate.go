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
			rows, err := conn.Query(ctx, `SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
				WHERE l.relation = to_regclass($1::text) AND NOT l.granted AND a.backend_type = 'client backend'`, table)
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
		_ = tx.Rollback(ctx)
		done <- killed
	}()
	return done
}
