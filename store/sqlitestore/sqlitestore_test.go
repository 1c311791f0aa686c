package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"

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
