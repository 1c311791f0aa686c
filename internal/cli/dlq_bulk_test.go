package cli

import (
	"strings"
	"testing"
)

// TestDLQCloseByFilter: `dlq discard` and `dlq resolve` without an ID close
// the open dead letters a selection matches, on the database and over
// --server (POST /v1/dlq/close) with the same output; each bad input is
// refused with exit 2 naming the problem, before anything is opened.
func TestDLQCloseByFilter(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		r := newRemoteEnv(t, e, "admin")
		for _, side := range []string{"l", "r"} {
			for i, c := range []string{"x", "x", "y"} {
				e.ok("enqueue", "--queue", "bulk", "--kind", "boom", "--id", "b"+string(rune('1'+i))+"-"+side,
					"--attr", "side="+side, "--payload", `{"c":"`+c+`"}`)
			}
		}
		killAll(t, e, "bulk", 6)
		open := "b1-l,b1-r,b2-l,b2-r,b3-l,b3-r"
		for _, bad := range []struct {
			want string
			args []string
		}{
			{"--all, alone", []string{"dlq", "discard", "--reason", "x"}},
			{"not both", []string{"dlq", "discard", "b1-l", "--kind", "boom", "--reason", "x"}},
			{"not both", []string{"dlq", "resolve", "b1-l", "--dry-run"}},
			{"cannot be narrowed by --queue", []string{"dlq", "resolve", "--all", "--queue", "bulk"}},
			{"--where", []string{"dlq", "discard", "--where", "payload.c ==", "--reason", "x"}},
			{"--dead-reason", []string{"dlq", "resolve", "--dead-reason", "permanent", "--yes"}},
			{"--reason is required", []string{"dlq", "discard", "--queue", "bulk"}},
			{"--until", []string{"dlq", "discard", "--queue", "bulk", "--until", "soon", "--reason", "x"}},
		} {
			e.fails(ExitUsage, bad.want, bad.args...)
			if rem := r.remote("", bad.args...); rem.code != ExitUsage || !strings.Contains(rem.stderr, bad.want) {
				t.Fatalf("--server %v: exit %d %q", bad.args, rem.code, rem.stderr)
			}
		}
		if ids := strings.Join(e.dlqIDs("--status", "open"), ","); ids != open {
			t.Fatalf("open after the refusals: %s", ids)
		}

		// The same selection of each side, on the database and over the
		// server: the same output.
		both := func(args ...string) {
			t.Helper()
			with := func(side string) []string {
				return append([]string{"dlq"}, append(args, "--attr", "side="+side)...)
			}
			l := e.run("", append(with("l"), "--actor", "admin-token")...)
			rem := r.remote("", with("r")...)
			if ln, rn := normalize(l.stdout, ""), normalize(rem.stdout, ""); l.code != 0 || rem.code != 0 || ln != rn {
				t.Fatalf("backstop dlq %v: --db exit %d\n%s%s\n--server exit %d\n%s%s", args, l.code, l.stdout, l.stderr,
					rem.code, rem.stdout, rem.stderr)
			}
		}
		both("discard", "--where", `payload.c == "x"`, "--reason", "cause x", "--dry-run")
		both("discard", "--where", `payload.c == "x"`, "--reason", "cause x", "--dry-run", "-o", "json")
		if ids := strings.Join(e.dlqIDs("--status", "open"), ","); ids != open {
			t.Fatalf("open after the dry runs: %s", ids)
		}
		both("discard", "--where", `payload.c == "x"`, "--reason", "cause x")
		if ids := strings.Join(e.dlqIDs("--status", "discarded"), ","); ids != "b1-l,b1-r,b2-l,b2-r" {
			t.Fatalf("discarded: %s", ids)
		}
		both("resolve", "--error-contains", "broken", "--note", "by hand", "-o", "json")
		if ids := strings.Join(e.dlqIDs("--status", "resolved"), ","); ids != "b3-l,b3-r" {
			t.Fatalf("resolved: %s", ids)
		}
		out := e.ok("dlq", "show", "b1-r")
		if !strings.Contains(out, "dlq.discarded") || !strings.Contains(out, "admin-token") || !strings.Contains(out, "cause x") {
			t.Fatalf("b1-r's history:\n%s", out)
		}
	})
}
