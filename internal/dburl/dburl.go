// Package dburl opens a store from the --db URL: sqlite://PATH or
// postgres://... (also postgresql://).
package dburl

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
	"github.com/backstophq/backstop/store/sqlitestore"
)

// Default is the embedded store used when no --db is given.
const Default = "sqlite://backstop.db"

// ErrBadURL marks a --db the user got wrong (bad input: the CLI exits 2):
// an unsupported scheme, a malformed URL, a SQLite file that cannot be
// opened. A database that cannot be reached or refuses the connection is
// not wrapped: that is a failure (exit 1), and its error names the cause.
var ErrBadURL = errors.New("bad database URL")

type badURLError struct{ err error }

func (e *badURLError) Error() string   { return e.err.Error() }
func (e *badURLError) Unwrap() []error { return []error{e.err, ErrBadURL} }

func badURL(format string, args ...any) error {
	return &badURLError{err: fmt.Errorf(format, args...)}
}

// Open opens (without migrating) the store the URL names, and refuses
// (*store.SchemaTooNewError) a database whose schema is newer than this
// binary.
func Open(ctx context.Context, url string) (store.Store, error) {
	s, err := open(ctx, url)
	if err != nil {
		return nil, err
	}
	if err := s.CheckSchema(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func open(ctx context.Context, url string) (store.Store, error) {
	switch {
	case strings.HasPrefix(url, "sqlite://"):
		path := strings.TrimPrefix(url, "sqlite://")
		if path == "" {
			return nil, badURL("--db %q: missing file path (sqlite://PATH)", url)
		}
		s, err := sqlitestore.Open(path)
		if err != nil {
			return nil, &badURLError{err: err}
		}
		return s, nil
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		// Parsed here first so a malformed URL is told apart from a
		// server that cannot be reached (pgstore.Open parses it again).
		if _, err := pgxpool.ParseConfig(url); err != nil {
			return nil, &badURLError{err: fmt.Errorf("--db: %w", err)}
		}
		return pgstore.Open(ctx, url)
	default:
		return nil, badURL("--db %q: unsupported URL; use sqlite://PATH or postgres://USER@HOST/DB", url)
	}
}
