package cli

import (
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/audit"
	"github.com/backstophq/backstop/internal/testwait"
)

// backstop audit list reads the operators' actions on the database and
// through the server alike: token create and revoke, queue pause (from the
// CLI) and resume (through the API, by the token's name), filtered by
// type, actor, target and time; bad filters exit 2 both ways.
func TestAuditListCLI(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		r := newRemoteEnv(t, e, "admin")
		e.fails(ExitUsage, "reason", "queues", "pause", "billing", "--reason", "bad\x00")
		e.ok("queues", "pause", "billing", "--reason", "card processor maintenance")
		if res := r.remote("", "queues", "resume", "billing", "--reason", "maintenance over"); res.code != 0 {
			t.Fatalf("resume over the server: exit %d: %s", res.code, res.stderr)
		}
		var tok struct{ ID string }
		e.json(&tok, "tokens", "create", "--name", "temp", "--role", "viewer")
		e.ok("tokens", "revoke", tok.ID)
		e.ok("enqueue", "--queue", "q", "--kind", "k") // not an operator action

		var all audit.Page
		testwait.For(t, "the five audit records", func() bool {
			all = audit.Page{}
			e.json(&all, "audit", "list")
			return len(all.Items) >= 5
		})
		got := []string{}
		for _, it := range all.Items {
			actor := it.Actor
			if strings.HasPrefix(actor, "cli:") {
				actor = "cli"
			}
			got = append(got, strings.TrimSpace(it.Type+" "+actor+" "+it.Target+" "+it.Reason))
		}
		want := []string{"token.created cli " + all.Items[0].Target, "queue.paused cli billing card processor maintenance", "queue.resumed admin-token billing maintenance over",
			"token.created cli " + tok.ID, "token.revoked cli " + tok.ID}
		if strings.Join(got, "|") != strings.Join(want, "|") || !all.Complete {
			t.Fatalf("audit list: %q, want %q", got, want)
		}
		count := func(args ...string) int {
			t.Helper()
			var p audit.Page
			e.json(&p, append([]string{"audit", "list"}, args...)...)
			return len(p.Items)
		}
		for _, c := range []struct {
			n    int
			args []string
		}{
			{2, []string{"--type", "queue.paused,queue.resumed"}},
			{1, []string{"--actor", "admin-token"}},
			{2, []string{"--target", tok.ID, "--since", "1h"}},
			{3, []string{"--since", "1h", "--limit", "3"}},
			{0, []string{"--until", "2020-01-01T00:00:00Z"}},
		} {
			if got := count(c.args...); got != c.n {
				t.Errorf("audit list %v: %d actions, want %d", c.args, got, c.n)
			}
		}
		r.same("audit", "list", "--type", "queue.paused,queue.resumed", "-o", "json")
		r.same("audit", "list", "--target", "billing")
		if out := e.ok("audit", "list", "--type", "queue.paused"); !strings.Contains(out, "queue.paused") || !strings.Contains(out, "billing") {
			t.Fatalf("table: %s", out)
		}
		for _, bad := range [][]string{
			{"type", "--type", "task.enqueued"},
			{"since", "--since", "yesterday"},
			{"until", "--since", "1h", "--until", "2h"},
			{"--limit", "--limit", "0"},
			{"after", "--after", "x"},
		} {
			e.fails(ExitUsage, bad[0], append([]string{"audit", "list"}, bad[1:]...)...)
			if res := r.remote("", append([]string{"audit", "list"}, bad[1:]...)...); res.code != ExitUsage {
				t.Errorf("audit list %v over the server: exit %d, want %d: %s", bad[1:], res.code, ExitUsage, res.stderr)
			}
		}
	})
}
