package store

import (
	"fmt"
	"io/fs"
	"strconv"
	"strings"
)

// SchemaTooNewError: the database's schema version is ahead of the
// migrations this binary embeds. A newer Backstop migrated it; this binary
// does not know what the newer schema promises (an older binary would, for
// instance, write state changes without the events a newer schema
// expects), so every open refuses it instead of using it.
type SchemaTooNewError struct {
	Driver   string // sqlite or postgres
	Database int64  // highest version recorded in the database
	Binary   int64  // highest version this binary embeds
}

func (e *SchemaTooNewError) Error() string {
	return fmt.Sprintf("the %s database schema is at version %d, newer than this binary's schema version %d: "+
		"it was migrated by a newer backstop; run that version (or newer) instead — refusing to use it",
		e.Driver, e.Database, e.Binary)
}

// MaxMigrationVersion is the highest version among the goose migration
// files (NNNNN_name.sql) in dir of fsys.
func MaxMigrationVersion(fsys fs.FS, dir string) (int64, error) {
	names, err := fs.Glob(fsys, dir+"/*.sql")
	if err != nil {
		return 0, err
	}
	var v int64
	for _, n := range names {
		base := n[strings.LastIndex(n, "/")+1:]
		num, _, ok := strings.Cut(base, "_")
		if !ok {
			return 0, fmt.Errorf("migration %s: no version prefix", n)
		}
		x, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("migration %s: %w", n, err)
		}
		v = max(v, x)
	}
	return v, nil
}

// CheckSchemaVersion returns a *SchemaTooNewError when the database's
// version (db) is ahead of the binary's (bin).
func CheckSchemaVersion(driver string, db, bin int64) error {
	if db > bin {
		return &SchemaTooNewError{Driver: driver, Database: db, Binary: bin}
	}
	return nil
}
