package cli

import (
	"strings"
	"testing"
)

// TestCLILogLevel: a one-shot command logs at --log-level (queues pause
// logs "queue paused" at info), on both stores; a bad level exits 2 naming
// the flag, before anything is done.
func TestCLILogLevel(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		if r := e.run("", "queues", "pause", "lv-a", "--log-level", "warn"); r.code != 0 || strings.Contains(r.stderr, "queue paused") {
			t.Errorf("--log-level warn: exit %d, stderr %q", r.code, r.stderr)
		}
		if r := e.run("", "queues", "pause", "lv-b", "--log-level", "INFO"); r.code != 0 || !strings.Contains(r.stderr, "queue paused") {
			t.Errorf("--log-level INFO: exit %d, stderr %q", r.code, r.stderr)
		}
		e.fails(ExitUsage, "--log-level", "queues", "pause", "lv-c", "--log-level", "chatty")
		if out := e.ok("queues", "list"); strings.Contains(out, "lv-c") {
			t.Errorf("a refused command paused its queue:\n%s", out)
		}
	})
}
