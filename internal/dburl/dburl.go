// Package dburl opens a store from the --db URL: sqlite://PATH or
// postgres://... (also postgresql://).
package dburl

import (
	"context"
	"fmt"
	"strings"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
	"github.com/backstophq/backstop/store/sqlitestore"
)

// Default is the embedded store used when no --db is given.
const Default = "sqlite://backstop.db"

// Open opens (without migrating) the store the URL names, and refuses
// (*store.SchemaTooNewError) a database whose schema is newer than this
// binary.
func Open(ctx context.Context, url string) (store.Store, error) {
	s, err := open(ctx, url)
	if err != nil {
		return nil, err
	}
	if err := s.(interface{ CheckSchema(context.Context) error }).CheckSchema(ctx); err != nil {
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
			return nil, fmt.Errorf("--db %q: missing file path (sqlite://PATH)", url)
		}
		return sqlitestore.Open(path)
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return pgstore.Open(ctx, url)
	default:
		return nil, fmt.Errorf("--db %q: unsupported URL; use sqlite://PATH or postgres://USER@HOST/DB", url)
	}
}
