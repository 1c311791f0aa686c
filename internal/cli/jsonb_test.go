package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testdb"
)

// TestJSONBRefusedExitsTwo: a payload (flag, file, batch line), a run's
// input and a replay or redrive patch that PostgreSQL's jsonb cannot hold
// exit 2 naming the field's path and jsonb, on both stores, writing
// nothing; an exec worker's result file holding one fails its attempt
// permanently, naming the path.
func TestJSONBRefusedExitsTwo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	wf := write("wf.yaml", "name: jb\nqueue: jq\nsteps:\n  - {id: a, kind: a}\n")
	badResult := write("result.json", `{"total":1e200000}`)
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		e.ok("workflows", "apply", wf)
		e.ok("enqueue", "--queue", "dq", "--kind", "boom", "--id", "d1", "--payload", `{"a":1}`)
		killAll(t, e, "dq", 1)
		for _, c := range []struct{ name, doc, path string }{
			{"lone surrogate", `{"a":"\udc00"}`, ".a"},
			{"NUL", `{"a":"x\u0000"}`, ".a"},
			{"number", `{"amount":1e200000}`, ".amount"},
		} {
			file := write(strings.ReplaceAll(c.name, " ", "-")+".json", c.doc)
			batch := write(strings.ReplaceAll(c.name, " ", "-")+".ndjson",
				`{"queue":"q","kind":"k"}`+"\n"+`{"queue":"q","kind":"k","payload":`+c.doc+"}\n")
			value := strings.TrimSuffix(c.doc[strings.Index(c.doc, ":")+1:], "}")
			for _, args := range []struct {
				want string
				args []string
			}{
				{"payload" + c.path, []string{"enqueue", "--queue", "q", "--kind", "k", "--payload", c.doc}},
				{"payload" + c.path, []string{"enqueue", "--queue", "q", "--kind", "k", "--payload-file", file}},
				{"payload" + c.path, []string{"enqueue", "--batch-file", batch}},
				{"input" + c.path, []string{"workflows", "run", "jb", "--input", c.doc}},
				{"payload.x", []string{"dlq", "replay", "d1", "--patch", "x=" + value}},
				{"merge_patch" + c.path, []string{"dlq", "replay", "d1", "--merge-patch", file}},
				{"payload.x", []string{"dlq", "redrive", "--queue", "dq", "--patch", "x=" + value}},
			} {
				r := e.run("", args.args...)
				if r.code != ExitUsage || !strings.Contains(r.stderr, args.want) || !strings.Contains(r.stderr, "jsonb") {
					t.Errorf("%s: %q: exit %d, stderr %q; want exit 2 naming %s and jsonb", c.name, args.args, r.code, r.stderr, args.want)
				}
			}
		}
		if ids := e.listIDs(); len(ids) != 1 || ids[0] != "d1" {
			t.Errorf("refused input wrote tasks: %v", ids)
		}
		if out := e.ok("runs", "list"); strings.Contains(out, "jb") {
			t.Errorf("a refused run input wrote a run: %s", out)
		}
		var d taskOut
		e.json(&d, "tasks", "show", "d1")
		if d.State != bt.StateDead || d.DLQStatus != bt.DLQOpen || compact(d.Payload) != `{"a":1}` {
			t.Errorf("refused patches changed the dead letter: %s %s %s", d.State, d.DLQStatus, d.Payload)
		}

		// An exec worker's result file jsonb cannot hold: the attempt fails
		// permanently, naming the value's path.
		e.ok("enqueue", "--queue", "rq", "--kind", "k", "--id", "r1", "--max-attempts", "5")
		if r := e.run("", "work", "--queue", "rq", "--exit-after-idle", "300ms", "--", "sh", "-c",
			`cp `+badResult+` "$BACKSTOP_RESULT_FILE"`); r.code != 0 {
			t.Fatalf("work: %+v", r)
		}
		var r1 taskOut
		e.json(&r1, "tasks", "show", "r1")
		if r1.State != bt.StateDead || r1.DeadReason != bt.ReasonPermanentError || r1.Attempt != 1 ||
			!strings.Contains(r1.LastError, "result.total") {
			t.Errorf("r1: %s %s after %d attempts, error %q; want a permanent dead letter naming result.total",
				r1.State, r1.DeadReason, r1.Attempt, r1.LastError)
		}
	})
}

// TestJSONBRefusedOverServer: over --server the server's 400 is exit 2
// with its message, naming the path; nothing is written.
func TestJSONBRefusedOverServer(t *testing.T) {
	t.Parallel()
	e := &cliEnv{t: t, db: testdb.SQLite(t)}
	var tok struct{ Secret string }
	e.json(&tok, "tokens", "create", "--name", "admin", "--role", "admin")
	s, err := dburl.Open(context.Background(), e.db)
	if err != nil {
		t.Fatal(err)
	}
	url := apiServerOn(t, s, &backstop.Config{}, api.Options{})
	server := []string{"--server", url, "--token", tok.Secret}
	file := filepath.Join(t.TempDir(), "wf.yaml")
	if err := os.WriteFile(file, []byte("name: jb\nqueue: jq\nsteps:\n  - {id: a, kind: a}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.ok("workflows", "apply", file)
	for _, c := range []struct {
		want string
		args []string
	}{
		{"payload.a", []string{"enqueue", "--queue", "q", "--kind", "k", "--payload", `{"a":"\udc00"}`}},
		{"payload.n", []string{"enqueue", "--queue", "q", "--kind", "k", "--payload", `{"n":1e-16384}`}},
		{"input.a", []string{"workflows", "run", "jb", "--input", `{"a":"\u0000"}`}},
	} {
		r := e.run("", append(server, c.args...)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, "jsonb") {
			t.Errorf("%q over --server: exit %d, stderr %q; want exit 2 naming %s and jsonb", c.args, r.code, r.stderr, c.want)
		}
	}
	if ids := e.listIDs(); len(ids) != 0 {
		t.Errorf("refused input wrote tasks: %v", ids)
	}
}
