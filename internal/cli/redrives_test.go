package cli

import (
	"testing"

	"github.com/backstophq/backstop/internal/testdb"
)

// Bad input to the redrive commands: exit 2 naming the flag, nothing done.
func TestRedrivesBadInput(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		e.fails(ExitUsage, "--confirm-over", "dlq", "redrive", "--queue", "q", "--confirm-over", "-1")
		e.fails(ExitUsage, "--sample", "dlq", "redrive", "--queue", "q", "--dry-run", "--sample", "101")
		e.fails(ExitUsage, "--limit", "redrives", "list", "--limit", "0")
		e.fails(ExitUsage, "--outcome", "redrives", "show", "x", "--outcome", "bogus")
		e.fails(ExitUsage, "--limit", "redrives", "resume", "x", "--limit", "-1")
		e.fails(ExitUsage, "--rate", "redrives", "resume", "x", "--rate", "-1")
		e.fails(ExitUsage, "subcommand", "redrives")
		e.fails(ExitNotFound, "nope", "redrives", "show", "nope")
		e.fails(ExitNotFound, "nope", "redrives", "cancel", "nope")
		e.fails(ExitNotFound, "nope", "redrives", "resume", "nope")
		out := e.ok("redrives", "list")
		if out != "ID  STATUS  REPLAYED  FAILED  STARTED  FINISHED  FILTER\n" {
			t.Fatalf("empty list: %q", out)
		}
	})
}

// A bad BACKSTOP_DLQ_REDRIVE_HEARTBEAT exits 2 naming it, before anything
// is done (t.Setenv: not parallel).
func TestRedriveHeartbeatEnvBadInput(t *testing.T) {
	for _, v := range []string{"soon", "-1s"} {
		t.Setenv("BACKSTOP_DLQ_REDRIVE_HEARTBEAT", v)
		e := &cliEnv{t: t, db: testdb.SQLite(t)}
		e.fails(ExitUsage, "BACKSTOP_DLQ_REDRIVE_HEARTBEAT", "redrives", "resume", "x")
	}
}
