package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/backstophq/backstop/store"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// versionTable records applied migrations, next to Backstop's tables in the
// connection's current schema.
const versionTable = "backstop_schema_version"

// Migrate implements store.Store: it applies every pending migration, in the
// first schema of the connection's search_path. Concurrent Migrate calls on
// the same schema (several processes starting at once) take turns.
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.CheckSchema(ctx); err != nil {
		return err
	}
	p, closeProvider, err := s.provider(ctx)
	if err != nil {
		return err
	}
	defer closeProvider()
	applied, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	s.schemaAt.Store(0)
	s.afterMigrations(len(applied))
	return nil
}

// afterMigrations drops the pool's idle connections (and each busy one
// when it is released) once n > 0 migrations ran: a statement a connection
// prepared before a migration changed a column it reads (its collation,
// its type) fails once ("cached plan must not change result type"), and
// new connections prepare against the schema as it now is.
func (s *Store) afterMigrations(n int) {
	if n > 0 {
		s.pool.Reset()
	}
}

// CheckSchema refuses (*store.SchemaTooNewError) a database whose schema
// version (in the connection's current schema) is ahead of this binary's
// migrations. A schema without the version table (new, empty) passes.
func (s *Store) CheckSchema(ctx context.Context) error {
	bin, err := store.MaxMigrationVersion(migrationFiles, "migrations")
	if err != nil {
		return fmt.Errorf("pgstore: migrations: %w", err)
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass('`+versionTable+`') IS NOT NULL`).Scan(&exists); err != nil {
		return fmt.Errorf("pgstore: schema version: %w", err)
	}
	if !exists {
		return nil
	}
	var db *int64
	if err := s.pool.QueryRow(ctx, `SELECT max(version_id) FROM `+versionTable).Scan(&db); err != nil {
		return fmt.Errorf("pgstore: schema version: %w", err)
	}
	if db == nil {
		return nil
	}
	return store.CheckSchemaVersion("postgres", *db, bin)
}

// MigrationStatus implements store.Store.
func (s *Store) MigrationStatus(ctx context.Context) ([]store.Migration, error) {
	p, closeProvider, err := s.provider(ctx)
	if err != nil {
		return nil, err
	}
	defer closeProvider()
	status, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: migration status: %w", err)
	}
	// goose's version table stores a timestamp without time zone, written
	// as now() in the session's TimeZone; read it back in that zone.
	loc := time.UTC
	var tz string
	if err := s.pool.QueryRow(ctx, "SELECT current_setting('TimeZone')").Scan(&tz); err == nil {
		if l, err := time.LoadLocation(tz); err == nil {
			loc = l
		}
	}
	out := make([]store.Migration, 0, len(status))
	for _, st := range status {
		m := store.Migration{Version: st.Source.Version, Name: path.Base(st.Source.Path)}
		if st.State == goose.StateApplied {
			a := st.AppliedAt
			at := time.Date(a.Year(), a.Month(), a.Day(), a.Hour(), a.Minute(), a.Second(), a.Nanosecond(), loc).UTC().Truncate(time.Microsecond)
			m.AppliedAt = &at
		}
		out = append(out, m)
	}
	return out, nil
}

// provider builds a goose provider over the pool. Its session lock is keyed
// by the current schema, so that migrations of unrelated schemas (tests,
// tenants) do not wait for each other.
func (s *Store) provider(ctx context.Context) (*goose.Provider, func(), error) {
	var schema *string
	if err := s.pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return nil, nil, fmt.Errorf("pgstore: migrate: %w", err)
	}
	if schema == nil {
		return nil, nil, errors.New("pgstore: migrate: no schema of the search_path exists; create it first")
	}
	h := fnv.New64a()
	h.Write([]byte("backstop migrations:" + *schema))
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(int64(h.Sum64()>>1)),
		lock.WithLockTimeout(1, 600),
		lock.WithUnlockTimeout(1, 60),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("pgstore: migrate: %w", err)
	}
	fsys, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, nil, err
	}
	db := stdlib.OpenDBFromPool(s.pool)
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithTableName(versionTable),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("pgstore: migrate: %w", err)
	}
	return p, func() { _ = p.Close() }, nil
}
