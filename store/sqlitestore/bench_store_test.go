package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/backstophq/backstop/store/sqlitestore"
)

// benchStore opens and migrates a fresh SQLite file for a benchmark
// (closed at its end).
func benchStore(b *testing.B) *sqlitestore.Store {
	b.Helper()
	s, err := sqlitestore.Open(filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	return s
}
