package pgstore_test

import (
	"testing"

	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store/pgstore"
)

// storeAt opens a store on a fresh test database migrated up to version
// and no further: where a migration test writes the data the migration
// under test must carry. The store is closed when the test ends.
func storeAt(t *testing.T, version int64) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Open(t.Context(), testdb.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.MigrateTo(t.Context(), version); err != nil {
		t.Fatal(err)
	}
	return s
}
