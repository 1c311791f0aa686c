package cli

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/internal/testdb"
)

// TestWorkExitAfterIdleWaitsForSlowClaim: `work --exit-after-idle` (in
// process) exits only once no claim is on its way: a claim slower than the
// idle time (a busy database) is not cut off by the exit, which would
// leave the queue's other tasks unclaimed.
func TestWorkExitAfterIdleWaitsForSlowClaim(t *testing.T) {
	t.Parallel()
	e := &cliEnv{t: t, db: testdb.Postgres(t)}
	e.ok("migrate")
	for range 6 {
		e.ok("enqueue", "--queue", "iq", "--kind", "k")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// A claim updates its tasks: it waits for this lock, held for
	// longer than the idle time.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE backstop_tasks IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	// Released a second after a claim is seen waiting for it.
	watch, err := pgx.Connect(ctx, e.db)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(ctx)
	released := make(chan struct{})
	go func() {
		defer close(released)
		defer tx.Rollback(ctx) //nolint:errcheck // ends the lock
		for range 300 {
			var q string
			err := watch.QueryRow(ctx, `SELECT coalesce(string_agg(regexp_replace(left(query, 60), '\s+', ' ', 'g'), ' | '), '') FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&q)
			if err != nil || q != "" {
				t.Logf("waiting: %s %v", q, err)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(time.Second)
	}()
	work := e.run("", "work", "--queue", "iq", "--concurrency", "2", "--exit-after-idle", "200ms", "--", "true")
	<-released
	if work.code != 0 {
		t.Fatalf("work: %+v", work)
	}
	var left []taskOut
	e.json(&left, "tasks", "list", "--queue", "iq", "--state", "pending")
	if len(left) > 0 {
		t.Fatalf("%d tasks left pending: work exited while its claim waited\n%s", len(left), work.stderr)
	}
}
