package sqlitestore

import (
	"context"
	"database/sql"
	"strings"

	"github.com/backstophq/backstop/store"
)

// ExplainList is the EXPLAIN QUERY PLAN of the statement List runs for f
// (its details, one a line), or "" when List answers from the kept counts
// without a statement.
func (s *Store) ExplainList(ctx context.Context, f store.ListFilter) (string, error) {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback() }()
	q, args, err := listStatement(ctx, tx, f)
	if err != nil || q == "" {
		return "", err
	}
	rows, err := tx.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var id, parent, notUsed int
		var detail string
		if err := rows.Scan(&id, &parent, &notUsed, &detail); err != nil {
			return "", err
		}
		lines = append(lines, detail)
	}
	return strings.Join(lines, "\n"), rows.Err()
}
