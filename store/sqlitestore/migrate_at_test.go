package sqlitestore

import (
	"path/filepath"
	"testing"

	"github.com/pressly/goose/v3"
)

// storeAt opens a store on a fresh file migrated up to version and no
// further, and returns its migration provider for the test's later steps:
// where a migration test writes the data the migration under test must
// carry. The store is closed when the test ends. Below 00050 the store
// leaves every count to the triggers (countsPerRow); a test migrating past
// it sets countsPerRow as its step leaves the schema.
func storeAt(t *testing.T, version int64) (*Store, *goose.Provider) {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "old.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	p, err := s.provider()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(t.Context(), version); err != nil {
		t.Fatal(err)
	}
	s.countsPerRow.Store(version < 50) // the trigger before 00050 counts every row
	s.replayPerRow.Store(version < 54) // the triggers before 00054 count every replayed row

	return s, p
}
