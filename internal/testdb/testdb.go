// Package testdb gives tests real databases to run against: a throwaway
// SQLite file, or a fresh schema on a PostgreSQL server.
//
// PostgreSQL comes from BACKSTOP_TEST_POSTGRES_URL (scripts/with-postgres
// starts a throwaway cluster and sets it). Without it, Postgres tests skip,
// unless BACKSTOP_TEST_REQUIRE_POSTGRES=1, where they fail: CI must never
// pass by silently skipping Postgres. This package must never touch anything
// outside the schemas it creates (and the databases of other collations it
// keeps for them: PostgresLocale).
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// EnvPostgresURL names the server Postgres tests run against.
	EnvPostgresURL = "BACKSTOP_TEST_POSTGRES_URL"
	// EnvRequirePostgres, set to 1, turns a missing server into a failure.
	EnvRequirePostgres = "BACKSTOP_TEST_REQUIRE_POSTGRES"
	// EnvPostgresLocale names a collation (see PostgresLocale) for the
	// database the Postgres tests' schemas are made in, instead of the
	// server URL's own: e.g. icu-en-US, where text compares as most
	// packaged and hosted servers' databases compare it.
	EnvPostgresLocale = "BACKSTOP_TEST_POSTGRES_LOCALE"
)

// Postgres returns a URL for the test server whose connections use a fresh,
// empty schema of their own (through search_path), dropped when the test
// ends. Close everything connected to it before the test's cleanups finish.
//
// With BACKSTOP_TEST_POSTGRES_LOCALE set, the schema is made in that
// locale's database (PostgresLocale).
func Postgres(t testing.TB) string {
	t.Helper()
	return PostgresLocale(t, os.Getenv(EnvPostgresLocale))
}

// PostgresLocale is Postgres in a database of the test server whose
// default collation is locale's: "icu-<ICU locale>" (icu-en-US),
// "libc-<locale>" (libc-C.utf8), or "" for the server URL's own database.
// The database, backstop_test_<locale>, is created on first use and kept
// for later runs (its schemas are each test's own, as Postgres makes
// them).
func PostgresLocale(t testing.TB, locale string) string {
	t.Helper()
	base := os.Getenv(EnvPostgresURL)
	if base == "" {
		if os.Getenv(EnvRequirePostgres) == "1" {
			t.Fatalf("testdb: %s=1 but %s is not set (run the tests under scripts/with-postgres)", EnvRequirePostgres, EnvPostgresURL)
		}
		t.Skipf("testdb: %s is not set; skipping PostgreSQL test (run under scripts/with-postgres)", EnvPostgresURL)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if locale != "" {
		var err error
		if base, err = localeDatabase(ctx, base, locale); err != nil {
			t.Fatalf("testdb: %v", err)
		}
	}
	schema := schemaName(t.Name())
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

// localeDatabase creates, unless it exists, the database of locale on
// base's server and returns base with that database.
func localeDatabase(ctx context.Context, base, locale string) (string, error) {
	provider, name, _ := strings.Cut(locale, "-")
	var with string
	switch provider {
	case "icu":
		with = "LOCALE_PROVIDER icu ICU_LOCALE " + quoteLiteral(name) + " LOCALE 'C.utf8'"
	case "libc":
		with = "LOCALE " + quoteLiteral(name)
	}
	if with == "" || name == "" {
		return "", fmt.Errorf("%s=%q: want icu-<ICU locale> or libc-<locale>", EnvPostgresLocale, locale)
	}
	db := "backstop_test_" + schemaHint(locale)
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("%s: %w", EnvPostgresURL, err)
	}
	u.Path = "/" + db
	localeMu.Lock()
	defer localeMu.Unlock()
	if localeMade[db] {
		return u.String(), nil
	}
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", db).Scan(&exists); err != nil {
		return "", err
	}
	if !exists {
		_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()+" TEMPLATE template0 "+with)
		var pgErr *pgconn.PgError
		// Another test process may have created it meanwhile.
		if err != nil && !(errors.As(err, &pgErr) && (pgErr.Code == "42P04" || pgErr.Code == "23505")) {
			return "", fmt.Errorf("create database %s (%s): %w", db, locale, err)
		}
	}
	localeMade[db] = true
	return u.String(), nil
}

var (
	localeMu   sync.Mutex
	localeMade = map[string]bool{}
)

// quoteLiteral is s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

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
	hint := schemaHint(testName)
	if len(hint) > 40 {
		hint = hint[len(hint)-40:]
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	return "t_" + hex.EncodeToString(rnd[:]) + "_" + hint
}

// schemaHint is s in lower case with every character but letters and
// digits turned into '_'.
func schemaHint(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
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
