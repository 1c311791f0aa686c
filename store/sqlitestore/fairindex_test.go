package sqlitestore_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/backstophq/backstop/store/sqlitestore"
	"github.com/backstophq/backstop/store/storetest"
)

// TestFairIndex: see storetest.FairIndex.
func TestFairIndex(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "backstop.db")
	s, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open(sqlitestore.DriverName, "file:"+path+"?_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	names := func(col string) []string {
		t.Helper()
		rows, err := db.Query(`SELECT ` + col + ` FROM sqlite_master WHERE type = 'index' AND tbl_name = 'backstop_tasks' AND name LIKE 'backstop\_fair\_%' ESCAPE '\' ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		return out
	}
	storetest.FairIndex(t, s, func() []string { return names("sql") }, func() {
		for _, name := range names("name") {
			if _, err := db.Exec(`DROP INDEX ` + name); err != nil {
				t.Fatal(err)
			}
		}
	})
}
