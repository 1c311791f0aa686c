package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/store/storetest"
)

// TestFairIndex: making a queue fair makes its index of pending tasks by
// the attribute's value, changing the attribute replaces it, turning
// fairness off drops it; fair claims rotate with it and, once it is gone,
// without it.
func TestFairIndex(t *testing.T) {
	b := setup(t)
	s, ctx := b.store, t.Context()
	conn, err := pgx.Connect(ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	indexes := func() []string {
		t.Helper()
		rows, err := conn.Query(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'backstop_tasks' AND indexname LIKE 'backstop\_fair\_%' ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return defs
	}
	storetest.FairIndex(t, s, indexes, func() {
		var drop string
		if err := conn.QueryRow(ctx, `SELECT 'DROP INDEX ' || string_agg(indexname, ', ') FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'backstop_tasks' AND indexname LIKE 'backstop\_fair\_%'`).Scan(&drop); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, drop); err != nil {
			t.Fatal(err)
		}
	})
}
