package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

// The store's own transactions commit their writes without waiting on
// the cluster's NOTIFY lock: their wake-up is a transaction of its own
// after the COMMIT (sqlWakeAfterCommit). PostgreSQL serializes the
// commits of transactions that NOTIFY (one lock, taken just before the
// commit record and held until the commit is over, its WAL flush and
// synchronous replication included), so a transaction that notified in
// the same transaction as its writes waited for every other notifying
// commit. Here another session holds that lock: its notifying commit
// waits for a synchronous standby that never comes (a cluster of the
// test's own, synchronous_standby_names set; the store's sessions commit
// with synchronous_commit = local). A run's start (Store.WritePlan) and
// a plan held for the COMMIT in InTx (a step settle's) commit their rows
// meanwhile, visible to a third session; their wake-ups follow once the
// lock is free and reach a listener. A plan that fails wakes nobody.
func TestWritesCommitWithoutTheNotifyLock(t *testing.T) {
	pg := testdb.OwnPostgres(t)
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	for _, q := range []string{`ALTER SYSTEM SET synchronous_standby_names = 'nobody'`, `SELECT pg_reload_conf()`,
		`CREATE TABLE wake_hold (x int)`} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := pgxpool.ParseConfig(pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "local"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := pgstore.New(pool)
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	wake := s.Wakeups(ctx)

	// holdNotifyLock commits a NOTIFY that waits for the standby, holding
	// the lock until release (which cancels the wait: the commit then
	// completes locally).
	holdNotifyLock := func() (release func()) {
		t.Helper()
		hcfg, err := pgx.ParseConfig(pg.URL)
		if err != nil {
			t.Fatal(err)
		}
		hcfg.RuntimeParams["synchronous_commit"] = "on" // the cluster's default is off
		holder, err := pgx.ConnectConfig(ctx, hcfg)
		if err != nil {
			t.Fatal(err)
		}
		pid := holder.PgConn().PID()
		held := func() bool {
			var held bool
			err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE pid = $1 AND locktype = 'object'
				AND classid = 'pg_database'::regclass AND objid = 0 AND granted)`, pid).Scan(&held)
			return err == nil && held
		}
		// The standby setting reaches the commits once the checkpointer
		// has read it: until then a commit does not wait; try again.
		var done chan error
		for try := 0; ; try++ {
			done = make(chan error, 1)
			// A transaction that wrote no WAL commits without waiting:
			// the holder writes a row.
			go func() {
				_, err := holder.Exec(ctx, `INSERT INTO wake_hold VALUES (1); SELECT pg_notify('elsewhere', '')`)
				done <- err
			}()
			deadline := time.Now().Add(time.Second)
			for !held() && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if held() {
				break
			}
			if try == 20 {
				t.Fatal("no commit waited for the synchronous standby")
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		return func() {
			if _, err := admin.Exec(ctx, `SELECT pg_cancel_backend($1)`, pid); err != nil {
				t.Error(err)
			}
			if err := <-done; err != nil {
				t.Errorf("the lock holder's commit: %v", err)
			}
			holder.Close(context.WithoutCancel(ctx))
		}
	}
	visible := func(id string) bool {
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM backstop_tasks WHERE id = $1`, id).Scan(&n)
		return err == nil && n == 1
	}
	woken := func(queue string) bool {
		deadline := time.After(10 * time.Second)
		for {
			select {
			case q := <-wake:
				if q == queue {
					return true
				}
			case <-deadline:
				return false
			}
		}
	}

	for _, via := range []string{"Store.WritePlan", "InTx, held for the COMMIT"} {
		queue := "wake-" + strings.Fields(via)[0]
		task := newTask(queue)
		task.ID = queue + "-1"
		write := func() error {
			w := store.PlanWrite{Tasks: []*bt.Task{task}}
			if via == "Store.WritePlan" {
				_, err := s.WritePlan(ctx, w)
				return err
			}
			return s.InTx(ctx, func(tx store.Tx) error { _, err := tx.WritePlan(ctx, w); return err })
		}
		release := holdNotifyLock()
		errc := make(chan error, 1)
		go func() { errc <- write() }()
		deadline := time.Now().Add(10 * time.Second)
		for !visible(task.ID) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		committed := visible(task.ID)
		release()
		if err := <-errc; err != nil {
			t.Fatalf("%s: %v", via, err)
		}
		if !committed {
			t.Fatalf("%s: the task was not committed while another session held the notify lock: its commit waited for it", via)
		}
		if !woken(queue) {
			t.Fatalf("%s: no wake-up of %s after the lock was released", via, queue)
		}
	}

	// A plan whose task id is taken writes nothing and wakes nobody.
	queue := "wake-failed"
	taken := newTask(queue)
	taken.ID = "wake-Store.WritePlan-1"
	fresh := newTask(queue)
	fresh.ID = queue + "-1"
	_, err = s.WritePlan(ctx, store.PlanWrite{Tasks: []*bt.Task{fresh, taken}})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a plan of a taken id: %v, want ErrConflict", err)
	}
	if visible(fresh.ID) {
		t.Fatal("a failed plan wrote its other task")
	}
	if _, err := admin.Exec(ctx, `SELECT pg_notify('backstop_wakeup', 'marker')`); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case q := <-wake:
			if q == queue {
				t.Fatal("a failed plan woke its queue")
			}
			if q != "marker" {
				continue
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the marker notification did not arrive")
		}
		break
	}
}
