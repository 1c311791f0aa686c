package main

import (
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/testdb"
)

// TestDLQRedriveDryRunAndConfirmation: --dry-run reports the count, a
// sample and the patch's diffs (masked) and changes nothing; a redrive over
// --confirm-over asks on a terminal (no: nothing replayed, exit 1; yes:
// replayed), needs --yes without a terminal (exit 2 naming it), and one at
// or under the threshold goes without asking.
func TestDLQRedriveDryRunAndConfirmation(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			url := st.url(t)
			c := deadLetters(t, url, "dry", 4)
			ctx := context.Background()
			dead := func() int {
				ts, err := c.DeadLetters(ctx, backstop.ListParams{Queue: "dry", Limit: 100})
				if err != nil {
					t.Fatal(err)
				}
				return len(ts)
			}
			history := func() int {
				all, err := c.Events(ctx, "dry-00000")
				if err != nil {
					t.Fatal(err)
				}
				return len(all)
			}
			run := func(stdin io.Reader, args ...string) (string, string, int) {
				t.Helper()
				return runStdin(t, stdin, append([]string{"--db", url, "dlq", "redrive", "--queue", "dry", "--rate", "0"}, args...)...)
			}
			before := history()

			out, errs, code := run(nil, "--dry-run", "--patch", "password=hunter2", "--patch", "fixed=true", "--sample", "2")
			if code != 0 || !strings.Contains(out, "would redrive 4 dead letters (dry run: nothing changed)") ||
				!strings.Contains(out, "dry-00000") || !strings.Contains(out, "dry-00001") || strings.Contains(out, "dry-00002") ||
				!strings.Contains(out, "add /fixed") || !strings.Contains(out, "add /password") ||
				!strings.Contains(out, "permanent_error") || !strings.Contains(out, "boom") || strings.Contains(out, "hunter2") {
				t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errs)
			}
			cmd := exec.Command(binary, "--db", url, "dlq", "redrive", "--queue", "dry", "--dry-run", "--merge-patch", "-", "-o", "json")
			cmd.Stdin = strings.NewReader(`{"token":"s3cret","n":1}`)
			b, err := cmd.Output()
			if err != nil {
				t.Fatalf("dry run json: %v %s", err, b)
			}
			var p backstop.RedriveProgress
			if err := json.Unmarshal(b, &p); err != nil {
				t.Fatalf("dry run json %q: %v", b, err)
			}
			if !p.DryRun || p.Total != 4 || p.RedriveID != "" || p.Preview == nil || p.Preview.Matched != 4 || len(p.Preview.Sample) != 4 {
				t.Fatalf("dry run json: %s", b)
			}
			d := p.Preview.Sample[0].Diff
			if d == nil || len(d.Changes) != 2 || d.Changes[0] != (backstop.PayloadChange{Op: "add", Path: "/n"}) ||
				d.Changes[1] != (backstop.PayloadChange{Op: "add", Path: "/token"}) || strings.Contains(string(b), "s3cret") {
				t.Fatalf("dry run diff: %s", b)
			}
			if dead() != 4 || history() != before {
				t.Fatalf("the dry run changed something: %d dead, %d events (was %d)", dead(), history(), before)
			}

			// Over the threshold from a pipe: --yes is needed.
			out, errs, code = run(strings.NewReader(""), "--confirm-over", "3")
			if code != 2 || !strings.Contains(errs, "--yes") || strings.Contains(errs, "[y/N]") || dead() != 4 {
				t.Fatalf("over the threshold from a pipe: exit %d %q %q, %d dead", code, out, errs, dead())
			}
			if _, errs, code := run(nil, "--confirm-over", "-1"); code != 2 || !strings.Contains(errs, "--confirm-over") {
				t.Fatalf("--confirm-over -1: exit %d %q", code, errs)
			}
			m, s := openPTY(t)
			typeAnswer(t, m, "n")
			out, errs, code = run(s, "--confirm-over", "3")
			if code != 1 || !strings.Contains(errs, "Redrive 4 dead letters?") || !strings.Contains(errs, "nothing replayed") || dead() != 4 ||
				history() != before {
				t.Fatalf("answered no: exit %d %q %q, %d dead", code, out, errs, dead())
			}
			typeAnswer(t, m, "y")
			out, errs, code = run(s, "--confirm-over", "3", "--limit", "2")
			if code != 0 || !strings.Contains(out, "2 replayed") || strings.Contains(out, "resumed") || dead() != 2 {
				t.Fatalf("answered yes: exit %d %q %q, %d dead", code, out, errs, dead())
			}
			// At the threshold (2 left, --confirm-over 2): no question.
			out, errs, code = run(strings.NewReader(""), "--confirm-over", "2")
			if code != 0 || strings.Contains(errs, "[y/N]") || !strings.Contains(out, "4 replayed") || dead() != 0 {
				t.Fatalf("at the threshold: exit %d %q %q, %d dead", code, out, errs, dead())
			}
		})
	}
}

// TestDLQRedriveDryRunOverServer: --dry-run and the confirmation through
// --server: the server's dry run (masked diffs, nothing changed), and exit
// 2 naming --yes without a terminal over the threshold.
func TestDLQRedriveDryRunOverServer(t *testing.T) {
	t.Parallel()
	db := testdb.SQLite(t)
	c := deadLetters(t, db, "sdry", 3)
	base := startServer(t, db)
	run := func(args ...string) (string, string, int) {
		t.Helper()
		return runStdin(t, strings.NewReader(""), append([]string{"--server", base, "dlq", "redrive", "--queue", "sdry", "--rate", "0"}, args...)...)
	}
	dead := func() int {
		ts, err := c.DeadLetters(context.Background(), backstop.ListParams{Queue: "sdry", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(ts)
	}
	out, errs, code := run("--dry-run", "--patch", "api_key=abc123")
	if code != 0 || !strings.Contains(out, "would redrive 3 dead letters") || !strings.Contains(out, "add /api_key") ||
		strings.Contains(out, "abc123") || dead() != 3 {
		t.Fatalf("dry run over the server: exit %d\n%s\n%s", code, out, errs)
	}
	out, errs, code = run("--confirm-over", "2")
	if code != 2 || !strings.Contains(errs, "--yes") || dead() != 3 {
		t.Fatalf("over the threshold: exit %d %q %q", code, out, errs)
	}
	out, errs, code = run("--confirm-over", "2", "--yes")
	if code != 0 || !strings.Contains(out, "3 replayed") || dead() != 0 {
		t.Fatalf("--yes: exit %d %q %q", code, out, errs)
	}
}
