package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/api"
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

// TestRemoteRedriveOverBudget: over --server, a redrive the server ended
// over_budget exits 2 naming the budget; failed and interrupted exit 1.
func TestRemoteRedriveOverBudget(t *testing.T) {
	st := &api.RedriveStatus{Status: "over_budget", Error: "the where expression's time budget (10s, limits.where_time) is spent"}
	st.RedriveID = "r1"
	if err := redriveEnd(st); exitCode(err) != ExitUsage || !strings.Contains(err.Error(), "limits.where_time") {
		t.Fatalf("over_budget: exit %d, %v", exitCode(err), err)
	}
	for _, s := range []string{"failed", "interrupted"} {
		st.Status = s
		if err := redriveEnd(st); err == nil || exitCode(err) != 1 {
			t.Fatalf("%s: exit %d, %v", s, exitCode(err), err)
		}
	}
	st.Status = "canceled"
	if redriveEnd(st) != nil || redriveEnd(st, "canceled") == nil {
		t.Fatal("canceled is an error only where named")
	}
	st.Status = "done"
	if err := redriveEnd(st); err != nil {
		t.Fatal(err)
	}
}
