package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/testdb"
)

// TestWorkHelpSaysWhereOutputIs: work --help names the commands that show
// a program's output, and each of them does show it (tasks show's table
// does not, which the help used to claim).
func TestWorkHelpSaysWhereOutputIs(t *testing.T) {
	t.Parallel()
	e := &cliEnv{t: t, db: testdb.SQLite(t)}
	help := e.ok("work", "--help")
	for _, want := range []string{"backstop tasks logs ID", "backstop dlq show\nID", "backstop tasks show ID -o json"} {
		if !strings.Contains(help, want) {
			t.Errorf("work --help lacks %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, "(tasks show ID)") {
		t.Errorf("work --help still sends the reader to tasks show's table")
	}
	id := strings.TrimSpace(e.ok("enqueue", "--queue", "out", "--kind", "k"))
	e.ok("work", "--queue", "out", "--permanent-exit-codes", "3", "--exit-after-idle", "200ms", "--",
		"sh", "-c", "echo marker-on-stdout; echo marker-on-stderr >&2; exit 3")
	for _, args := range [][]string{{"tasks", "logs", id}, {"dlq", "show", id}, {"tasks", "show", id, "-o", "json"}} {
		out := e.ok(args...)
		if !strings.Contains(out, "marker-on-stdout") || !strings.Contains(out, "marker-on-stderr") {
			t.Errorf("%s does not show the program's output:\n%s", strings.Join(args, " "), out)
		}
	}
}

// TestCLILogsAreJSON: a one-shot command's log lines are JSON, like work's
// and serve's (queues pause logged text through the slog default).
func TestCLILogsAreJSON(t *testing.T) {
	t.Parallel()
	e := &cliEnv{t: t, db: testdb.SQLite(t)}
	r := e.run("", "queues", "pause", "logged")
	if r.code != 0 {
		t.Fatalf("queues pause: %d %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	var rec map[string]any
	if len(lines) == 0 || json.Unmarshal([]byte(lines[0]), &rec) != nil || rec["msg"] != "queue paused" {
		t.Fatalf("queues pause logged %q, want JSON lines with msg \"queue paused\"", r.stderr)
	}
	for _, l := range lines {
		if json.Unmarshal([]byte(l), &rec) != nil {
			t.Errorf("not a JSON log line: %q", l)
		}
	}
}
