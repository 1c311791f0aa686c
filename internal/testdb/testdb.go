// Package testdb gives tests real databases to run against: a throwaway
// SQLite file, or a fresh schema on a PostgreSQL server.
//
// PostgreSQL comes from BACKSTOP_TEST_POSTGRES_URL (scripts/with-postgres
// starts a throwaway cluster and sets it). Without it, Postgres tests skip,
// unless BACKSTOP_TEST_REQUIRE_POSTGRES=1, where they fail: CI must never
// pass by silently skipping Postgres. This package must never touch anything
// outside the schemas it creates.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// EnvPostgresURL names the server Postgres tests run against.
	EnvPostgresURL = "BACKSTOP_TEST_POSTGRES_URL"
	// EnvRequirePostgres, set to 1, turns a missing server into a failure.
	EnvRequirePostgres = "BACKSTOP_TEST_REQUIRE_POSTGRES"
)

// Postgres returns a URL for the test server whose connections use a fresh,
// empty schema of their own (through search_path), dropped when the test
// ends. Close everything connected to it before the test's cleanups finish.
func Postgres(t testing.TB) string {
	t.Helper()
	base := os.Getenv(EnvPostgresURL)
	if base == "" {
		if os.Getenv(EnvRequirePostgres) == "1" {
			t.Fatalf("testdb: %s=1 but %s is not set (run the tests under scripts/with-postgres)", EnvRequirePostgres, EnvPostgresURL)
		}
		t.Skipf("testdb: %s is not set; skipping PostgreSQL test (run under scripts/with-postgres)", EnvPostgresURL)
	}

	schema := schemaName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := adminExec(ctx, base, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("testdb: create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// lock_timeout turns a connection leaked by the test (holding locks
		// in the schema) into an error instead of a hang.
		err := adminExec(ctx, base,
			"SET lock_timeout = '10s'",
			"DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		if err != nil {
			t.Errorf("testdb: drop schema %s: %v", schema, err)
		}
	})

	u, err := withSearchPath(base, schema)
	if err != nil {
		t.Fatalf("testdb: %s: %v", EnvPostgresURL, err)
	}
	return u
}

// SQLite returns a URL for a new SQLite database file in the test's
// temporary directory.
func SQLite(t testing.TB) string {
	t.Helper()
	return "sqlite://" + filepath.Join(t.TempDir(), "backstop.db")
}

func adminExec(ctx context.Context, connURL string, stmts ...string) error {
	conn, err := pgx.Connect(ctx, connURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// schemaName is unique per call and hints at the test that owns it, within
// PostgreSQL's 63-byte identifier limit.
func schemaName(testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	hint := b.String()
	if len(hint) > 40 {
		hint = hint[len(hint)-40:]
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	return "t_" + hex.EncodeToString(rnd[:]) + "_" + hint
}

// withSearchPath adds search_path to a postgres:// URL; pgx sends unknown
// URL parameters to the server as run-time parameters.
func withSearchPath(raw, schema string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("testdb: want a postgres:// URL, got %q", raw)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// EachStore runs test in parallel subtests "sqlite" and "postgres", each
// with a fresh database's URL (SQLite, Postgres: skipped as Postgres says).
func EachStore(t *testing.T, test func(t *testing.T, db string)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		test(t, SQLite(t))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		test(t, Postgres(t))
	})
}
