package pgstore

import (
	"context"
	"strings"

	"github.com/backstophq/backstop/store"
)

// TaskEventRows exposes taskEventRows to the external tests (plans).
var TaskEventRows = taskEventRows

// ExplainList is the plan of the query List runs for f, with the given
// settings (SET LOCAL name = value) in its transaction.
func (s *Store) ExplainList(ctx context.Context, f store.ListFilter, settings map[string]string) (string, error) {
	where, args, err := listWhere(f)
	if err != nil {
		return "", err
	}
	args = append(args, 50)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	for k, v := range settings {
		if _, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", k, v); err != nil {
			return "", err
		}
	}
	rs, err := tx.Query(ctx, "EXPLAIN "+listQuery(where, len(args), f.WithoutPayload, f.Newest), args...)
	if err != nil {
		return "", err
	}
	defer rs.Close()
	var plan []string
	for rs.Next() {
		var line string
		if err := rs.Scan(&line); err != nil {
			return "", err
		}
		plan = append(plan, line)
	}
	return strings.Join(plan, "\n"), rs.Err()
}
