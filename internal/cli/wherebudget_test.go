package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/testdb"
)

// TestWhereBudgetExit: on the database, BACKSTOP_LIMITS_WHERE_COST bounds
// a where evaluated in Go: spent, the command exits 2 naming the budget;
// a where in the SQL subset is not counted. A bad value is exit 2 naming
// the variable.
func TestWhereBudgetExit(t *testing.T) {
	t.Setenv("BACKSTOP_LIMITS_WHERE_COST", "50")
	for _, db := range []struct {
		name string
		url  func(testing.TB) string
	}{{"sqlite", testdb.SQLite}, {"postgres", testdb.Postgres}} {
		t.Run(db.name, func(t *testing.T) {
			e := &cliEnv{t: t, db: db.url(t)}
			for i := range 20 {
				e.ok("enqueue", "--queue", "wb", "--kind", "k", "--payload", fmt.Sprintf(`{"tags":["a","b","c"],"n":%d}`, i))
			}
			e.fails(ExitUsage, "limits.where_cost", "tasks", "list", "--queue", "wb", "--where", `payload.tags.exists(t, t == "z")`)
			var ts []json.RawMessage
			e.json(&ts, "tasks", "list", "--queue", "wb", "--where", `payload.n >= 0`)
			if len(ts) != 20 {
				t.Fatalf("SQL where under the budget: %d tasks", len(ts))
			}
		})
	}
	t.Setenv("BACKSTOP_LIMITS_WHERE_COST", "lots")
	e := &cliEnv{t: t, db: testdb.SQLite(t)}
	r := e.run("", "tasks", "list", "--where", `payload.n >= 0`)
	if r.code != ExitUsage || !strings.Contains(r.stderr, "BACKSTOP_LIMITS_WHERE_COST") {
		t.Fatalf("bad budget variable: exit %d, %s", r.code, r.stderr)
	}
}
