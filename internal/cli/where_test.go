package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestWhereCLI: --where selects by payload and attributes in tasks list,
// dlq list, dlq export and dlq redrive (its --dry-run too), in SQL or in
// Go, locally and through a server (the same output); a bad expression
// exits 2 naming --where, nothing done.
func TestWhereCLI(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		for i := range 6 {
			e.ok("enqueue", "--queue", "wq", "--kind", "boom", "--id", fmt.Sprintf("w%d", i),
				"--payload", fmt.Sprintf(`{"customer":{"id":%d},"tags":["t%d"]}`, 40+i%3, i%2),
				"--attr", "tenant="+[]string{"acme", "globex"}[i%2])
		}
		killAll(t, e, "wq", 6)
		e.ok("enqueue", "--queue", "live", "--kind", "k", "--id", "l1", "--payload", `{"customer":{"id":42}}`, "--attr", "tenant=acme")
		const sqlWhere = `payload.customer.id == 42 && attributes.tenant == "acme"`
		const goWhere = `payload.tags.exists(t, t == "t1")`
		if ids := e.listIDs("--where", sqlWhere); strings.Join(ids, ",") != "l1,w2" {
			t.Fatalf("tasks list --where: %v", ids)
		}
		if ids := e.dlqIDs("--where", sqlWhere); strings.Join(ids, ",") != "w2" {
			t.Fatalf("dlq list --where: %v", ids)
		}
		if ids := e.dlqIDs("--where", goWhere, "--limit", "2"); strings.Join(ids, ",") != "w1,w3" {
			t.Fatalf("dlq list --where (Go) --limit 2: %v", ids)
		}
		out := e.ok("dlq", "export", "--where", `payload.customer.id in [40, 41]`)
		var got []string
		sc := bufio.NewScanner(strings.NewReader(out))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var d struct{ ID string }
			_ = json.Unmarshal(sc.Bytes(), &d)
			got = append(got, d.ID)
		}
		if strings.Join(got, ",") != "w0,w1,w3,w4" {
			t.Fatalf("dlq export --where: %v", got)
		}
		r := newRemoteEnv(t, e, "admin")
		r.same("dlq", "list", "--where", sqlWhere, "-o", "json")
		r.same("tasks", "list", "--where", goWhere, "-o", "json")
		// Bad expressions: exit 2 naming --where and the position, nothing done.
		for _, args := range [][]string{{"tasks", "list"}, {"dlq", "list"}, {"dlq", "export"}, {"dlq", "redrive"}} {
			e.fails(ExitUsage, "--where", append(args, "--where", `payload.customer.id ==`)...)
			e.fails(ExitUsage, "1:23", append(args, "--where", `payload.customer.id ==`)...)
			e.fails(ExitUsage, "not bool", append(args, "--where", `payload.customer.id`)...)
			if res := r.remote("", append(args, "--where", `payload.customer.id ==`)...); res.code != ExitUsage {
				t.Fatalf("remote %v with a bad where: exit %d %s", args, res.code, res.stderr)
			}
		}
		// A redrive by a Go-side where: the dry run counts and samples its
		// matches (the same through a server), nothing replayed.
		out = r.same("dlq", "redrive", "--where", goWhere, "--dry-run").stdout
		if !strings.Contains(out, "would redrive 3 dead letters") || !strings.Contains(out, "sample (3)") ||
			!strings.Contains(out, "w1 ") || !strings.Contains(out, "w5 ") || strings.Contains(out, "w2 ") {
			t.Fatalf("dlq redrive --where (Go) --dry-run:\n%s", out)
		}
		if n := len(e.dlqIDs("--status", "open")); n != 6 {
			t.Fatalf("open after dry runs: %d, want 6", n)
		}
		e.ok("dlq", "redrive", "--where", sqlWhere)
		if ids := e.dlqIDs("--status", "open"); strings.Join(ids, ",") != "w0,w1,w3,w4,w5" {
			t.Fatalf("open after the redrive by payload: %v", ids)
		}
		if out := e.ok("dlq", "redrive", "--where", goWhere); !strings.Contains(out, "3 replayed, 0 failed") {
			t.Fatalf("dlq redrive --where (Go): %s", out)
		}
		if ids := e.dlqIDs("--status", "open"); strings.Join(ids, ",") != "w0,w4" {
			t.Fatalf("open after the redrive by a Go-side where: %v", ids)
		}
	})
}
