package cli

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/testdb"
)

// TestInvalidInputExitsTwo: input stored before issue 13 (invalid UTF-8,
// contradictory retry policies, absurd max_attempts, a run_at of year 1)
// and inputs that exited 1 (a directory as a file) exit 2, writing nothing.
func TestInvalidInputExitsTwo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	batchBadUTF8 := write("bad-utf8.ndjson", "{\"queue\":\"q\",\"kind\":\"k\"}\n{\"queue\":\"q\",\"kind\":\"k\",\"payload\":{\"a\":\"\xff\xfe\"}}\n")
	batchBadAttr := write("bad-attr.ndjson", "{\"queue\":\"q\",\"kind\":\"k\",\"attributes\":{\"a\":\"\xff\"}}\n")
	batchBoth := write("both.ndjson", `{"queue":"q","kind":"k","retry":{"schedule":["1s"],"base":"2s"}}`+"\n")
	batchBaseMax := write("basemax.ndjson", `{"queue":"q","kind":"k","retry":{"base":"1h","max":"1s"}}`+"\n")
	batchAttempts := write("attempts.ndjson", `{"queue":"q","kind":"k","max_attempts":1000000000000}`+"\n")
	batchYear1 := write("year1.ndjson", `{"queue":"q","kind":"k","run_at":"0001-01-01T00:00:00Z"}`+"\n")
	base := []string{"enqueue", "--queue", "q", "--kind", "k"}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"payload not UTF-8", append(base, "--payload", "{\"a\":\"\xff\xfe\"}"), "payload"},
		{"idempotency key not UTF-8", append(base, "--idempotency-key", "\xff"), "--idempotency-key"},
		{"merge key with a NUL", append(base, "--merge-key", "m\x00"), "--merge-key"},
		{"payload file is a directory", append(base, "--payload-file", dir), "--payload-file"},
		{"batch file is a directory", []string{"enqueue", "--batch-file", dir}, "--batch-file"},
		{"batch payload not UTF-8", []string{"enqueue", "--batch-file", batchBadUTF8}, "line 2: payload"},
		{"batch attribute not UTF-8", []string{"enqueue", "--batch-file", batchBadAttr}, "line 1"},
		{"schedule and base", []string{"enqueue", "--batch-file", batchBoth}, "retry"},
		{"base above max", []string{"enqueue", "--batch-file", batchBaseMax}, "retry"},
		{"max_attempts 10^12", []string{"enqueue", "--batch-file", batchAttempts}, "max_attempts"},
		{"max_attempts 10^12 flag", append(base, "--max-attempts", "1000000000000"), "max_attempts"},
		{"batch run_at of year 1", []string{"enqueue", "--batch-file", batchYear1}, "run_at"},
		{"run_at of year 1", append(base, "--run-at", "0001-01-01T00:00:00Z"), "--run-at"},
		{"deadline of year 1", append(base, "--deadline", "0001-01-01T00:00:00Z"), "--deadline"},
		{"tasks cursor", []string{"tasks", "list", "--after", "a\x00b"}, "after"},
		{"tasks cursor with a space", []string{"tasks", "list", "--after", "a b"}, "after"},
		{"dlq cursor", []string{"dlq", "list", "--after", "\xff"}, "after"},
		{"dlq export cursor", []string{"dlq", "export", "--after", "\x00"}, "after"},
		{"workers cursor", []string{"workers", "list", "--after", "\x01"}, "after"},
		{"events cursor", []string{"events", "tail", "--after", "garbage"}, "cursor"},
	}
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		for _, c := range cases {
			r := e.run("", c.args...)
			if r.code != ExitUsage || !strings.Contains(r.stderr, c.want) {
				t.Errorf("%s: exit %d, stderr %q; want exit 2 naming %q", c.name, r.code, r.stderr, c.want)
			}
		}
		if ids := e.listIDs(); len(ids) != 0 {
			t.Fatalf("bad input wrote tasks: %v", ids)
		}

		// Replay: a patch or merge patch with invalid UTF-8, a run_at of
		// year 1: exit 2 and the dead letter stays as it was.
		e.ok("enqueue", "--queue", "dq", "--kind", "boom", "--id", "d1", "--payload", `{"a":1}`)
		killAll(t, e, "dq", 1)
		mergeFile := filepath.Join(t.TempDir(), "merge.json")
		if err := os.WriteFile(mergeFile, []byte("{\"a\":\"\xff\"}"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"dlq", "replay", "d1", "--patch", "a=\xff"},
			{"dlq", "replay", "d1", "--patch", "a=\"\xfe\""},
			{"dlq", "replay", "d1", "--merge-patch", mergeFile},
			{"dlq", "replay", "d1", "--run-at", "0001-01-01T00:00:00Z"},
			{"dlq", "redrive", "--queue", "dq", "--patch", "a=\xff"},
		} {
			r := e.run("", args...)
			if r.code != ExitUsage {
				t.Errorf("%q: exit %d, stderr %q; want 2", args, r.code, r.stderr)
			}
		}
		var d taskOut
		e.json(&d, "tasks", "show", "d1")
		if d.State != "dead" || compact(d.Payload) != `{"a":1}` {
			t.Fatalf("refused replays changed the dead letter: state %s payload %s", d.State, d.Payload)
		}
	})
}

// TestTextFlagsCheckedBeforeTheServer: over --server a text flag that is
// not UTF-8 would be sent as U+FFFD and stored; it is refused before any
// request (the server here is a closed port: reaching it would exit 1).
func TestTextFlagsCheckedBeforeTheServer(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := "http://" + l.Addr().String()
	l.Close()
	for _, args := range [][]string{
		{"enqueue", "--queue", "q", "--kind", "k", "--idempotency-key", "\xff"},
		{"enqueue", "--queue", "q", "--kind", "k", "--attr", "a=\xfe"},
		{"dlq", "discard", "x", "--reason", "no\xff"},
		{"dlq", "resolve", "x", "--note", "n\xc3"},
		{"tasks", "list", "--kind", "\xff"},
	} {
		var out, errb strings.Builder
		code := Main(append([]string{"--server", server, "--token", "t"}, args...), strings.NewReader(""), &out, &errb)
		if code != ExitUsage || !strings.Contains(errb.String(), "UTF-8") {
			t.Errorf("%q over --server: exit %d, stderr %q; want exit 2 naming the text", args, code, errb.String())
		}
	}
}

// TestDLQExportRefusesToOverwrite: --out naming an existing file exits 2
// and leaves it as it was; --force overwrites it.
func TestDLQExportRefusesToOverwrite(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		e.ok("enqueue", "--queue", "q", "--kind", "boom", "--id", "x")
		killAll(t, e, "q", 1)
		out := filepath.Join(t.TempDir(), "export.ndjson")
		const earlier = "an earlier export\n"
		if err := os.WriteFile(out, []byte(earlier), 0o600); err != nil {
			t.Fatal(err)
		}
		e.fails(ExitUsage, "--force", "dlq", "export", "--out", out)
		if b, _ := os.ReadFile(out); string(b) != earlier {
			t.Fatalf("refused export changed the file: %q", b)
		}
		e.ok("dlq", "export", "--out", out, "--force")
		if b, _ := os.ReadFile(out); !strings.Contains(string(b), `"id":"x"`) || strings.Contains(string(b), earlier) {
			t.Fatalf("--force: file holds %q", b)
		}
		fresh := filepath.Join(t.TempDir(), "new.ndjson")
		// A failed export leaves no file behind (a retry would be refused).
		e.fails(ExitUsage, "after", "dlq", "export", "--out", fresh, "--after", "a b")
		if _, err := os.Stat(fresh); !os.IsNotExist(err) {
			t.Fatalf("failed export left %s: %v", fresh, err)
		}
		e.ok("dlq", "export", "--out", fresh)
		if b, _ := os.ReadFile(fresh); !strings.Contains(string(b), `"id":"x"`) {
			t.Fatalf("new file: %q", b)
		}
	})
}

// TestDatabaseURLErrors: against the real throwaway cluster, a database
// that does not exist (no sslmode in the URL, so pgx tries TLS first) is
// reported as such, and a server that cannot be reached exits 1 (a
// failure), while a malformed URL stays bad input (exit 2).
func TestDatabaseURLErrors(t *testing.T) {
	t.Parallel()
	run := func(db string, args ...string) cliResult {
		var out, errb strings.Builder
		code := Main(append([]string{"--db", db}, args...), strings.NewReader(""), &out, &errb)
		return cliResult{code: code, stdout: out.String(), stderr: errb.String()}
	}
	for _, db := range []string{"postgres://a b@/x", "postgres://host:notaport/x", "mysql://localhost/x", "sqlite://"} {
		if r := run(db, "tasks", "list"); r.code != ExitUsage {
			t.Errorf("--db %s: exit %d (%s), want 2", db, r.code, r.stderr)
		}
	}

	// A port with nothing listening: connection refused is a failure.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	refused := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/backstop", port)
	for _, args := range [][]string{{"tasks", "list"}, {"migrate", "status"}} {
		if r := run(refused, args...); r.code != ExitFailure || !strings.Contains(r.stderr, "connection refused") {
			t.Errorf("%v on a closed port: exit %d, stderr %q; want exit 1 naming the refused connection", args, r.code, r.stderr)
		}
	}

	base := os.Getenv(testdb.EnvPostgresURL)
	if base == "" {
		if os.Getenv(testdb.EnvRequirePostgres) == "1" {
			t.Fatalf("%s=1 but %s is not set", testdb.EnvRequirePostgres, testdb.EnvPostgresURL)
		}
		t.Skipf("%s is not set; run under scripts/with-postgres", testdb.EnvPostgresURL)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/backstop_no_such_database"
	q := u.Query()
	q.Del("sslmode") // pgx then tries TLS first, and the cluster refuses it
	u.RawQuery = q.Encode()
	for _, args := range [][]string{{"tasks", "list"}, {"migrate"}} {
		r := run(u.String(), args...)
		if r.code != ExitFailure || !strings.Contains(r.stderr, `database "backstop_no_such_database" does not exist`) ||
			strings.Contains(r.stderr, "tls") {
			t.Errorf("%v on a missing database: exit %d, stderr %q; want exit 1 saying the database does not exist", args, r.code, r.stderr)
		}
	}
}
