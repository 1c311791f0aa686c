package testdb

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// A locale that is neither icu-<locale> nor libc-<locale> is refused,
// naming the variable, before anything connects.
func TestLocaleDatabaseRefusesAnUnknownForm(t *testing.T) {
	for _, bad := range []string{"en-US", "icu-", "libc", "ICU-en-US"} {
		_, err := localeDatabase(t.Context(), "postgres://nowhere.invalid/x", bad)
		if err == nil || !strings.Contains(err.Error(), EnvPostgresLocale) {
			t.Errorf("%q: %v, want an error naming %s", bad, err, EnvPostgresLocale)
		}
	}
}

// PostgresLocale's schema lives in a database of that collation.
func TestPostgresLocaleMakesTheSchemaInItsDatabase(t *testing.T) {
	if os.Getenv(EnvPostgresURL) == "" && os.Getenv(EnvRequirePostgres) != "1" {
		t.Skip("no Postgres")
	}
	u := PostgresLocale(t, "icu-en-US")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var provider, icu string
	if err := conn.QueryRow(ctx, `SELECT coalesce(to_jsonb(d)->>'datlocprovider', 'c'), coalesce(to_jsonb(d)->>'daticulocale', '')
		FROM pg_database d WHERE datname = current_database()`).Scan(&provider, &icu); err != nil {
		t.Fatal(err)
	}
	if provider != "i" || icu != "en-US" {
		t.Fatalf("database of %s: provider %q, ICU locale %q; want i, en-US", u, provider, icu)
	}
	// 'B' sorts between 'a' and 'c' under en-US, after both by bytes.
	var between bool
	if err := conn.QueryRow(ctx, `SELECT 'a' < 'B' AND 'B' < 'c'`).Scan(&between); err != nil || !between {
		t.Fatalf("en-US order: %v %v", between, err)
	}
}
