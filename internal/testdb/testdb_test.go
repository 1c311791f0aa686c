package testdb_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/internal/testdb"
)

func TestPostgresGivesAFreshSchemaAndDropsIt(t *testing.T) {
	base := os.Getenv(testdb.EnvPostgresURL)
	var url, schema string
	t.Run("user", func(t *testing.T) {
		url = testdb.Postgres(t)
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var n int
		err = conn.QueryRow(ctx, `SELECT current_schema(), (SELECT count(*) FROM pg_tables WHERE schemaname = current_schema())`).Scan(&schema, &n)
		if err != nil {
			t.Fatal(err)
		}
		if schema == "public" || !strings.Contains(schema, "user") || n != 0 {
			t.Fatalf("schema %q with %d tables, want a fresh one named after the test", schema, n)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE t (id int)"); err != nil {
			t.Fatal(err)
		}
	})
	if schema == "" {
		t.Skip("no server")
	}
	if other := testdb.Postgres(t); other == url {
		t.Error("two calls gave the same URL")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("schema %s still exists after the test ended", schema)
	}
}

// recorder is a testing.TB whose Skip and Fatal are recorded instead of
// ending the test that runs it.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) run() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		testdb.Postgres(r)
	}()
	<-done
}

func TestPostgresWithoutServer(t *testing.T) {
	t.Setenv(testdb.EnvPostgresURL, "")

	t.Setenv(testdb.EnvRequirePostgres, "")
	r := &recorder{TB: t}
	r.run()
	if r.skipped == "" || r.failed != "" {
		t.Errorf("without a server: skipped %q, failed %q; want a skip", r.skipped, r.failed)
	}

	t.Setenv(testdb.EnvRequirePostgres, "1")
	r = &recorder{TB: t}
	r.run()
	if r.failed == "" || r.skipped != "" {
		t.Errorf("without a server but required: skipped %q, failed %q; want a failure", r.skipped, r.failed)
	}
}

func TestSQLite(t *testing.T) {
	t.Parallel()
	u := testdb.SQLite(t)
	if !strings.HasPrefix(u, "sqlite://") || !strings.HasSuffix(u, "/backstop.db") {
		t.Errorf("SQLite = %q", u)
	}
	if testdb.SQLite(t) == u {
		t.Error("two calls gave the same file")
	}
}
