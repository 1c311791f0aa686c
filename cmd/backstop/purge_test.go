package main

import (
	"context"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/testdb"
)

// TestDLQPurgeDryRunAndConfirmation: --dry-run counts and deletes nothing;
// on a terminal purge asks first (no: nothing deleted, exit 1; yes:
// deleted); from a pipe or with --yes it deletes without asking.
func TestDLQPurgeDryRunAndConfirmation(t *testing.T) {
	t.Parallel()
	db := testdb.SQLite(t)
	c := deadLetters(t, db, "purge-a", 3)
	open := func() int {
		ts, err := c.DeadLetters(context.Background(), backstop.ListParams{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(ts)
	}
	purge := func(stdin io.Reader, args ...string) (string, string, int) {
		t.Helper()
		return runStdin(t, stdin, append([]string{"--db", db, "dlq", "purge", "--status", "open", "--older-than", "0s", "--below-floor"}, args...)...)
	}

	out, errs, code := purge(nil, "--dry-run")
	if code != 0 || !strings.Contains(out, "would purge 3 dead letters") || open() != 3 {
		t.Fatalf("dry run: exit %d %q %q, %d left", code, out, errs, open())
	}
	out, _, _ = purge(nil, "--dry-run", "-o", "json")
	if compactJSON(out) != `{"purged":0,"would_purge":3,"dry_run":true}` {
		t.Fatalf("dry run json: %s", out)
	}

	m, s := openPTY(t)
	typeAnswer(t, m, "n")
	out, errs, code = purge(s)
	if code != 1 || !strings.Contains(errs, "Delete 3 dead letters") || !strings.Contains(errs, "[y/N]") ||
		!strings.Contains(errs, "nothing deleted") || open() != 3 {
		t.Fatalf("answered no: exit %d %q %q, %d left", code, out, errs, open())
	}
	typeAnswer(t, m, "y")
	out, errs, code = purge(s)
	if code != 0 || !strings.Contains(out, "purged 3 dead letters") || open() != 0 {
		t.Fatalf("answered yes: exit %d %q %q, %d left", code, out, errs, open())
	}

	deadLetters(t, db, "purge-b", 2)
	out, errs, code = purge(s, "--yes")
	if code != 0 || strings.Contains(errs, "[y/N]") || !strings.Contains(out, "purged 2") || open() != 0 {
		t.Fatalf("--yes on a terminal: exit %d %q %q, %d left", code, out, errs, open())
	}
	// Open dead letters from a pipe: no terminal to confirm on, so --yes is
	// needed (exit 2 naming it, nothing deleted); with it they go.
	deadLetters(t, db, "purge-c", 2)
	out, errs, code = purge(strings.NewReader(""))
	if code != 2 || !strings.Contains(errs, "--yes") || strings.Contains(errs, "[y/N]") || open() != 2 {
		t.Fatalf("open from a pipe without --yes: exit %d %q %q, %d left", code, out, errs, open())
	}
	out, errs, code = purge(strings.NewReader(""), "--yes")
	if code != 0 || strings.Contains(errs, "[y/N]") || !strings.Contains(out, "purged 2") || open() != 0 {
		t.Fatalf("open from a pipe with --yes: exit %d %q %q, %d left", code, out, errs, open())
	}
	// Closed records (the default statuses) from a pipe: deleted without
	// asking, as scripts expect.
	deadLetters(t, db, "purge-d", 2)
	for _, d := range []string{"purge-d-00000", "purge-d-00001"} {
		if _, err := c.Discard(context.Background(), backstop.DiscardParams{ID: d, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(binary, "--db", db, "dlq", "purge", "--older-than", "0s", "--below-floor")
	cmd.Stdin = strings.NewReader("")
	b, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(b), "purged 2") {
		t.Fatalf("closed from a pipe: %v %s", err, b)
	}
}

func compactJSON(s string) string {
	return strings.Join(strings.Fields(s), "")
}
