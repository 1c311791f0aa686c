package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
	"github.com/backstophq/backstop/store/sqlitestore"
)

// execSQL runs one statement on the database behind a store.
func execSQL(t *testing.T, s store.Store, stmt string) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch st := s.(type) {
	case *sqlitestore.Store:
		_, err = st.DB().ExecContext(ctx, stmt)
	case *pgstore.Store:
		_, err = st.Pool().Exec(ctx, stmt)
	default:
		t.Fatalf("unknown store %T", s)
	}
	if err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// TestNewerSchemaIsRefused: a database whose schema version is ahead of
// the binary (a fake version 99 in goose's table, as a newer backstop would
// leave it) is refused by every command that opens the store, with exit 1
// and an error naming both versions; migrate never says "up to date", and
// nothing is written. The library's Migrate refuses it too.
func TestNewerSchemaIsRefused(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		ctx := context.Background()
		var res struct {
			Version int64 `json:"version"`
		}
		e.json(&res, "migrate")
		e.ok("enqueue", "--queue", "q", "--kind", "k")
		s, err := dburl.Open(ctx, e.db)
		if err != nil {
			t.Fatal(err)
		}
		execSQL(t, s, "INSERT INTO backstop_schema_version (version_id, is_applied) VALUES (99, true)")
		s.Close()

		want := fmt.Sprintf("schema is at version 99, newer than this binary's schema version %d", res.Version)
		for _, args := range [][]string{
			{"migrate"}, {"migrate", "status"}, {"enqueue", "--queue", "q", "--kind", "k"}, {"tasks", "list"},
			{"stats"}, {"queues", "list"}, {"dlq", "list"}, {"events", "tail"}, {"workers", "list"},
			{"work", "--queue", "q", "--exit-after-idle", "1s", "--", "true"},
		} {
			r := e.run("", args...)
			if r.code != ExitFailure || !strings.Contains(r.stderr, want) || strings.Contains(r.stdout+r.stderr, "up to date") {
				t.Errorf("backstop %s: exit %d, stdout %q, stderr %q; want exit 1 naming %q", strings.Join(args, " "),
					r.code, r.stdout, r.stderr, want)
			}
		}

		_, err = dburl.Open(ctx, e.db)
		var tooNew *store.SchemaTooNewError
		if !errors.As(err, &tooNew) || tooNew.Database != 99 || tooNew.Binary != res.Version {
			t.Fatalf("dburl.Open: %v, want a SchemaTooNewError 99 > %d", err, res.Version)
		}
		// The library: Migrate on a store opened without the check.
		var raw store.Store
		if strings.HasPrefix(e.db, "sqlite://") {
			raw, err = sqlitestore.Open(strings.TrimPrefix(e.db, "sqlite://"))
		} else {
			raw, err = pgstore.Open(ctx, e.db)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		if err := raw.Migrate(ctx); !errors.As(err, &tooNew) {
			t.Fatalf("Migrate on a newer schema: %v, want a SchemaTooNewError", err)
		}
		// Nothing was written: one task, the one enqueued before.
		n, err := raw.List(ctx, store.ListFilter{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(n) != 1 {
			t.Errorf("%d tasks after the refused commands, want 1", len(n))
		}
	})
}
