package pgstore_test

import (
	"context"
	"testing"

	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store/pgstore"
)

// benchStore opens and migrates a store on the throwaway cluster for a
// benchmark (closed at its end).
func benchStore(b *testing.B) *pgstore.Store {
	b.Helper()
	ctx := context.Background()
	s, err := pgstore.Open(ctx, testdb.Postgres(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	return s
}
