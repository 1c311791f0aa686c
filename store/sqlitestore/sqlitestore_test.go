package sqlitestore_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlitestore"
	"github.com/backstophq/backstop/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T) store.Store {
	s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "backstop.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, open, storetest.WithTx("sql.Tx", func(ctx context.Context, s store.Store) (any, func() error, func() error, error) {
		tx, err := s.(*sqlitestore.Store).DB().BeginTx(ctx, nil)
		if err != nil {
			return nil, nil, nil, err
		}
		return tx, tx.Commit, tx.Rollback, nil
	}), storetest.WithBoundTx("sql.Tx", func(ctx context.Context, st store.Store) (store.Tx, func() error, func() error, error) {
		// The typed composable writes (sqlitestore.Txs) on a *sql.Tx the
		// caller began on the writer.
		s := st.(*sqlitestore.Store)
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			return nil, nil, nil, err
		}
		return store.Bind(s.Txs(), tx), tx.Commit, tx.Rollback, nil
	}), storetest.WithLockWaitProbe(func(_ context.Context, st store.Store) (bool, error) {
		// A transaction waits for the one writer connection.
		return st.(*sqlitestore.Store).DB().Stats().WaitCount > 0, nil
	}))
}

// BenchmarkDrain: go test -run '^$' -bench Drain -benchtime 100000x ./store/sqlitestore/
// (add -tags backstop_purego for the pure-Go driver).
func BenchmarkDrain(b *testing.B) {
	s, err := sqlitestore.Open(filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	storetest.BenchDrain(b, s)
}

// A commit by another connection (as another process would make) wakes
// subscribers with "" even though no in-process signal was sent.
func TestWakeupFromAnotherConnection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "backstop.db")
	s, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	wake := s.Wakeups(ctx)
	other, err := sql.Open(sqlitestore.DriverName, "file:"+path+"?_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Exec(`INSERT INTO backstop_payloads (task_id, data) VALUES ('x', x'7b7d')`); err != nil {
		t.Fatal(err)
	}
	select {
	case q := <-wake:
		if q != "" {
			t.Fatalf("wake-up %q, want the any-queue wake-up", q)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after another connection committed")
	}
	cancel()
	for range wake { // closed when ctx ends
	}
}
