package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
)

// apiServer serves the HTTP API on a loopback port over the database db
// and returns its URL.
func apiServer(t *testing.T, db string) string {
	t.Helper()
	return apiServerWith(t, db, &backstop.Config{})
}

// apiServerWith is apiServer with the library configured by lib (its
// logger is replaced by a silent one).
func apiServerWith(t *testing.T, db string, lib *backstop.Config) string {
	t.Helper()
	return apiServerOpts(t, db, lib, api.Options{})
}

// apiServerOpts is apiServerWith with the server's options (its client,
// logger and rate limit are set here).
func apiServerOpts(t *testing.T, db string, lib *backstop.Config, o api.Options) string {
	t.Helper()
	s, err := dburl.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return apiServerOn(t, s, lib, o)
}

// apiServerOn is apiServerOpts over a store already open (closed with the
// server).
func apiServerOn(t *testing.T, s store.Store, lib *backstop.Config, o api.Options) string {
	t.Helper()
	lib.Logger = slog.New(slog.DiscardHandler)
	c, err := backstop.NewClient(s, lib)
	if err != nil {
		t.Fatal(err)
	}
	o.Client, o.Logger, o.RateLimit = c, slog.New(slog.DiscardHandler), -1
	srv, err := api.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() {
		_ = hs.Close()
		srv.Close()
		s.Close()
	})
	return "http://" + ln.Addr().String()
}

// remoteEnv runs the same CLI commands against the database and against a
// server on that database.
type remoteEnv struct {
	*cliEnv
	url, token string
}

func newRemoteEnv(t *testing.T, e *cliEnv, role string) *remoteEnv {
	var tok struct{ Secret string }
	e.json(&tok, "tokens", "create", "--name", role+"-token", "--role", role)
	return &remoteEnv{cliEnv: e, url: apiServer(t, e.db), token: tok.Secret}
}

func (r *remoteEnv) remote(stdin string, args ...string) cliResult {
	r.t.Helper()
	return r.run(stdin, append([]string{"--server", r.url, "--token", r.token}, args...)...)
}

// same runs args both ways and requires the same exit code and stdout.
func (r *remoteEnv) same(args ...string) cliResult {
	r.t.Helper()
	l, rem := r.run("", args...), r.remote("", args...)
	if l.code != rem.code || l.stdout != rem.stdout {
		r.t.Errorf("backstop %s:\n--db: exit %d\n%s%s\n--server: exit %d\n%s%s", strings.Join(args, " "),
			l.code, l.stdout, l.stderr, rem.code, rem.stdout, rem.stderr)
	}
	return l
}

var (
	timeRE = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|…)?`)
	seqRE  = regexp.MustCompile(`"seq": \d+`)
	// An event's cursor (and the id of an event that has none of its own).
	cursorRE = regexp.MustCompile(`"(cursor|id)": "\d+(-\d+)*"`)
	uuidRE   = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	durRE    = regexp.MustCompile(`\b\d+(\.\d+)?(µs|ms|s)\b`)
	spRE     = regexp.MustCompile(` +`)
	sideRE   = regexp.MustCompile(`\b([a-z0-9]+)-[lr]\b`)
)

// normalize hides what two runs of a change on twin tasks cannot share:
// times, generated ids, durations, and the twins' own ids.
func normalize(s, id string) string {
	if id != "" {
		s = strings.ReplaceAll(s, id, "ID")
	}
	s = timeRE.ReplaceAllString(s, "TIME")
	s = uuidRE.ReplaceAllString(s, "UUID")
	s = durRE.ReplaceAllString(s, "DUR")
	s = seqRE.ReplaceAllString(s, `"seq": N`)
	s = cursorRE.ReplaceAllString(s, `"$1": "CURSOR"`)
	s = sideRE.ReplaceAllString(s, "$1-S")
	return spRE.ReplaceAllString(s, " ")
}

// twin runs a change on the local twin (--db) and on the remote one
// (--server), ID in args standing for each twin's id, and requires the
// same exit code and the same stdout once normalized.
func (r *remoteEnv) twin(localID, remoteID string, args ...string) {
	r.t.Helper()
	with := func(id string) []string {
		out := make([]string, len(args))
		for i, a := range args {
			out[i] = strings.ReplaceAll(a, "ID", id)
		}
		return out
	}
	l := r.run("", append(with(localID), localActor(args)...)...)
	rem := r.remote("", with(remoteID)...)
	if ln, rn := normalize(l.stdout, localID), normalize(rem.stdout, remoteID); l.code != rem.code || ln != rn {
		r.t.Errorf("backstop %s: --db: exit %d, --server: exit %d; %s\n--db:\n%s%s\n--server:\n%s%s", strings.Join(args, " "),
			l.code, rem.code, firstDiff(ln, rn), l.stdout, l.stderr, rem.stdout, rem.stderr)
	}
}

// localActor makes a local DLQ change record the actor the server records
// for the token (its name), so histories compare equal.
func localActor(args []string) []string {
	if len(args) >= 2 && args[0] == "dlq" && (args[1] == "replay" || args[1] == "discard" || args[1] == "resolve" || args[1] == "redrive") {
		return []string{"--actor", "admin-token"}
	}
	return nil
}

// TestCLIOverServer runs every enqueue, tasks and dlq command against the
// database and against a real server on the same database, and compares
// the outputs (table and JSON) and exit codes.
func TestCLIOverServer(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		r := newRemoteEnv(t, e, "admin")
		// Twins for the changes (-l local, -r remote) and tasks to read.
		for _, id := range []string{"a-l", "a-r", "b-l", "b-r", "c-l", "c-r"} {
			e.ok("enqueue", "--queue", "q", "--kind", "boom", "--id", id, "--attr", "twin=tw-"+id[2:],
				"--payload", `{"n":1}`, "--retry-schedule", "10ms", "--max-attempts", "2")
		}
		for _, id := range []string{"rd1-l", "rd2-l", "rd1-r", "rd2-r"} {
			e.ok("enqueue", "--queue", "q", "--kind", "boom", "--id", id, "--attr", "redrive=side-"+id[4:])
		}
		e.ok("enqueue", "--queue", "q", "--kind", "boom", "--id", "fine")
		runUntil(t, e.db, "q", func(ctx context.Context, task *backstop.Task) error {
			if task.ID == "fine" {
				return nil
			}
			backstop.RecordDetail(ctx, "detail of "+task.ID)
			if strings.HasPrefix(task.ID, "rd") {
				return backstop.Permanent(errors.New("card declined"))
			}
			return fmt.Errorf("upstream 503 on attempt %d", task.Attempt)
		}, func(c *backstop.Client) bool {
			dead, err := c.DeadLetters(context.Background(), backstop.ListParams{})
			return err == nil && len(dead) == 10
		})
		for _, id := range []string{"w-l", "w-r"} {
			e.ok("enqueue", "--queue", "later", "--kind", "k", "--id", id, "--delay", "1h")
		}

		// Reads, on the same data: identical output.
		for _, o := range []string{"table", "json"} {
			r.same("tasks", "list", "-o", o)
			r.same("tasks", "list", "--state", "dead,succeeded", "--limit", "3", "-o", o)
			r.same("tasks", "list", "--attr", "twin=tw-l", "--queue", "q", "--kind", "boom", "-o", o)
			r.same("tasks", "list", "--after", "b-l", "-o", o)
			r.same("tasks", "show", "a-l", "-o", o)
			r.same("tasks", "show", "fine", "-o", o)
			r.same("dlq", "list", "-o", o)
			r.same("dlq", "list", "--reason", "permanent_error", "--status", "open", "--since", "2000-01-01T00:00:00Z", "-o", o)
			r.same("dlq", "list", "--error-contains", "503", "--until", "1h", "-o", o) // an age: nothing that old
			r.same("dlq", "show", "rd1-l", "-o", o)
			r.same("workers", "list", "-o", o)
			r.same("workers", "list", "--state", "stopped", "--queue", "q", "-o", o)
			if got := r.same("workers", "show", "test-worker", "-o", o); got.code != 0 || !strings.Contains(got.stdout, "stopped") ||
				!strings.Contains(got.stdout, "upstream 503") {
				t.Errorf("workers show test-worker: %+v", got)
			}
		}
		r.same("dlq", "export")
		r.same("dlq", "export", "--reason", "attempts_exhausted", "--limit", "2")

		// Refusals: the same exit codes.
		for _, c := range []struct {
			code int
			args []string
		}{
			{ExitNotFound, []string{"tasks", "show", "nope"}},
			{ExitNotFound, []string{"workers", "show", "nope"}},
			{ExitUsage, []string{"workers", "list", "--state", "bogus"}},
			{ExitNotFound, []string{"dlq", "show", "fine"}},
			{ExitNotFound, []string{"dlq", "discard", "fine", "--reason", "x"}},
			{ExitConflict, []string{"tasks", "cancel", "fine"}},
			{ExitUsage, []string{"tasks", "list", "--state", "bogus"}},
			{ExitUsage, []string{"dlq", "list", "--reason", "bogus"}},
			{ExitUsage, []string{"enqueue", "--queue", "bad queue!", "--kind", "k"}},
			{ExitUsage, []string{"enqueue", "--queue", "q", "--kind", "k", "--payload", "{not json"}},
			{ExitConflict, []string{"enqueue", "--queue", "q", "--kind", "k", "--id", "fine", "--priority", "1"}},
			{ExitUsage, []string{"dlq", "replay", "rd1-l", "--patch", "n.x=1", "--merge-patch", "/nonexistent"}},
			{ExitUsage, []string{"dlq", "purge", "--older-than", "1d", "--status", "bogus"}},
		} {
			if got := r.same(c.args...); got.code != c.code {
				t.Errorf("backstop %s: exit %d, want %d", strings.Join(c.args, " "), got.code, c.code)
			}
		}
		// A patch through a scalar is unprocessable: exit 2 both ways.
		r.twin("a-l", "a-r", "dlq", "replay", "ID", "--patch", "n.deeper=1")

		// Changes, on twin tasks: the same output once ids and times are
		// normalized.
		for _, o := range []string{"table", "json"} {
			r.twin("x-l"+o, "x-r"+o, "enqueue", "--queue", "q2", "--kind", "k", "--id", "ID", "--payload", `{"a":[1,2]}`,
				"--attr", "k=v", "--priority", "3", "--max-attempts", "4", "--timeout", "30s", "--deadline", "2100-01-01T00:00:00Z",
				"--total-steps", "5", "--complexity", "2.5", "--retry-schedule", "1s,5s", "--delay", "1h", "-o", o)
			r.twin("ik-l"+o, "ik-r"+o, "enqueue", "--queue", "q2", "--kind", "k", "--idempotency-key", "ID", "-o", o)
			r.twin("ik-l"+o, "ik-r"+o, "enqueue", "--queue", "q2", "--kind", "k", "--idempotency-key", "ID", "-o", o) // duplicate
		}
		r.twin("w-l", "w-r", "tasks", "cancel", "ID", "-o", "json")
		r.twin("a-l", "a-r", "dlq", "replay", "ID", "--patch", "n=2", "--delay", "1h", "-o", "json")
		r.twin("a-l", "a-r", "dlq", "replay", "ID") // no longer a dead letter: replayed: false
		r.twin("a-l", "a-r", "tasks", "show", "ID", "-o", "json")
		r.twin("b-l", "b-r", "dlq", "discard", "ID", "--reason", "bad data", "-o", "json")
		r.twin("c-l", "c-r", "dlq", "resolve", "ID", "--note", "done by hand")
		r.twin("c-l", "c-r", "dlq", "show", "ID", "-o", "json")
		r.twin("side-l", "side-r", "dlq", "redrive", "--attr", "redrive=ID", "--rate", "0")
		r.twin("tw-l", "tw-r", "dlq", "list", "--status", "replayed,discarded,resolved", "--attr", "twin=ID", "-o", "json")
		r.same("dlq", "purge", "--older-than", "1d", "--below-floor")
		if got := r.remote("", "dlq", "purge", "--older-than", "0s", "--status", "discarded", "-o", "json"); got.stdout != "{\n  \"purged\": 2\n}\n" {
			t.Errorf("purge over --server: %+v", got)
		}

		// Batch files: the same summary; a bad record names its line.
		dir := t.TempDir()
		write := func(name, body string) string {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}
		for _, o := range []string{"table", "json"} {
			for _, side := range []string{"side-l", "side-r"} {
				write("good-"+o+side+".ndjson", `{"queue":"b","kind":"k","payload":{"i":1}}`+"\n\n"+
					`{"queue":"b","kind":"k","merge_key":"m`+o+side+`"}`+"\n"+`{"queue":"b","kind":"k","merge_key":"m`+o+side+`"}`+"\n")
			}
			r.twin("side-l", "side-r", "enqueue", "--batch-file", filepath.Join(dir, "good-"+o+"ID.ndjson"), "-o", o)
		}
		bad := write("bad.ndjson", `{"queue":"b","kind":"k"}`+"\n"+`{"queue":"b","kind":"k","max_attempts":-1}`+"\n")
		l, rem := r.run("", "enqueue", "--batch-file", bad), r.remote("", "enqueue", "--batch-file", bad)
		if l.code != ExitUsage || rem.code != ExitUsage || !strings.Contains(l.stderr, "line 2") || !strings.Contains(rem.stderr, "line 2") {
			t.Errorf("bad batch: --db exit %d %s; --server exit %d %s", l.code, l.stderr, rem.code, rem.stderr)
		}

		// What cannot work over a server says so.
		for _, args := range [][]string{
			{"dlq", "discard", "b-l", "--reason", "x", "--actor", "me"},
			{"enqueue", "--queue", "q", "--kind", "k", "--merge-rule", "append"},
			{"tasks", "list", "--view", "stuck"},
			// queues list goes through GET /v1/queues now; stats has no
			// endpoint (TestEveryCommandHonoursServer covers every command).
			{"stats"},
		} {
			if got := r.remote("", args...); got.code != ExitUsage || !strings.Contains(got.stderr, "server") {
				t.Errorf("backstop --server %s: exit %d, stderr %q", strings.Join(args, " "), got.code, got.stderr)
			}
		}
	})
}

// TestCLIOverServerRoles: a viewer reads (payloads masked as the API masks
// them) and is refused changes with exit 1 naming the role problem; a bad
// token is refused.
func TestCLIOverServerRoles(t *testing.T) {
	t.Parallel()
	e := &cliEnv{t: t, db: testdb.SQLite(t)}
	r := newRemoteEnv(t, e, "viewer")
	e.ok("enqueue", "--queue", "q", "--kind", "k", "--id", "t1", "--payload", `{"n":1}`)
	var shown map[string]json.RawMessage
	out := r.remote("", "tasks", "show", "t1", "-o", "json")
	if out.code != 0 || json.Unmarshal([]byte(out.stdout), &shown) != nil || shown["id"] == nil {
		t.Fatalf("viewer tasks show: %+v", out)
	}
	if got := r.remote("", "tasks", "cancel", "t1"); got.code != ExitFailure || !strings.Contains(got.stderr, "403") {
		t.Errorf("viewer cancel: %+v", got)
	}
	r.token = "bst_wrong"
	if got := r.remote("", "tasks", "list"); got.code != ExitFailure || !strings.Contains(got.stderr, "401") {
		t.Errorf("bad token: %+v", got)
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return fmt.Sprintf("line %d: %q != %q", i+1, al[i], bl[i])
		}
	}
	return fmt.Sprintf("%d lines != %d lines", len(al), len(bl))
}

// TestWorkLogs: `backstop work` (on the database and over --server) puts
// the program's output lines into the execution's log, and `tasks logs`
// prints them the same both ways.
func TestWorkLogs(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		r := newRemoteEnv(t, e, "admin")
		e.ok("enqueue", "--queue", "local", "--kind", "k", "--id", "via-db")
		e.ok("enqueue", "--queue", "remote", "--kind", "k", "--id", "via-server")
		prog := []string{"--", "sh", "-c", `echo "out $BACKSTOP_TASK_ID"; echo err >&2; printf 'no newline'`}
		if got := e.run("", append([]string{"work", "--queue", "local", "--exit-after-idle", "300ms"}, prog...)...); got.code != 0 {
			t.Fatalf("work: %+v", got)
		}
		if got := r.remote("", append([]string{"work", "--queue", "remote", "--exit-after-idle", "300ms"}, prog...)...); got.code != 0 {
			t.Fatalf("work --server: %+v", got)
		}
		for _, id := range []string{"via-db", "via-server"} {
			// stdout and stderr are read side by side: each stream's lines
			// keep their order, the two streams' lines interleave as read.
			got := r.same("tasks", "logs", id)
			var out []string
			sawErr := false
			for _, l := range strings.Split(strings.TrimSuffix(got.stdout, "\n"), "\n") {
				if l == "err" {
					sawErr = true
					continue
				}
				out = append(out, l)
			}
			if got.code != 0 || !sawErr || strings.Join(out, "|") != "out "+id+"|no newline" {
				t.Errorf("tasks logs %s: %+v, want out %s, no newline and err", id, got, id)
			}
			r.same("tasks", "logs", id, "-o", "json", "--follow")
		}
		if got := r.same("tasks", "logs", "nope"); got.code != ExitNotFound {
			t.Errorf("tasks logs nope: exit %d", got.code)
		}
		e.ok("enqueue", "--queue", "idle", "--kind", "k", "--id", "never-ran")
		if got := r.same("tasks", "logs", "never-ran"); got.code != ExitNotFound {
			t.Errorf("tasks logs never-ran: exit %d", got.code)
		}
	})
}

// TestCLIRedaction: secrets planted in a payload never appear in the
// CLI's output, on the database or over --server; --raw shows them and
// records a task.payload_viewed event with the actor.
func TestCLIRedaction(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		r := newRemoteEnv(t, e, "admin")
		payload := `{"to":"a@example.com","password":"SECRET-1","deep":[{"Api-Key":"SECRET-2"}]}`
		e.ok("enqueue", "--queue", "q", "--kind", "boom", "--id", "sec", "--payload", payload, "--max-attempts", "1")
		runUntil(t, e.db, "q", func(ctx context.Context, task *backstop.Task) error {
			return backstop.Permanent(errors.New("no"))
		}, func(c *backstop.Client) bool {
			dead, err := c.DeadLetters(context.Background(), backstop.ListParams{})
			return err == nil && len(dead) == 1
		})
		reads := [][]string{{"tasks", "show", "sec"}, {"tasks", "show", "sec", "-o", "json"}, {"tasks", "list", "--with-payload", "-o", "json"},
			{"dlq", "list", "--with-payload", "-o", "json"}, {"dlq", "show", "sec"}, {"dlq", "show", "sec", "-o", "json"}, {"dlq", "export"},
			{"tasks", "show", "sec", "-o", "json"}}
		for _, args := range reads {
			got := r.same(args...)
			for _, s := range []string{"SECRET-1", "SECRET-2", "SECRET-3"} {
				if strings.Contains(got.stdout, s) {
					t.Errorf("backstop %s shows %s:\n%s", strings.Join(args, " "), s, got.stdout)
				}
			}
			if !strings.Contains(got.stdout, "a@example.com") {
				t.Errorf("backstop %s: the rest of the payload should stay readable:\n%s", strings.Join(args, " "), got.stdout)
			}
		}
		// A replay's patch is masked in the history too.
		e.ok("dlq", "replay", "sec", "--patch", "password=SECRET-3")
		if got := r.same("tasks", "show", "sec"); strings.Contains(got.stdout, "SECRET") || !strings.Contains(got.stdout, "a@example.com") {
			t.Errorf("after a patched replay:\n%s", got.stdout)
		}
		// Raw: shown, and recorded (once per view) with who looked.
		if got := e.ok("tasks", "show", "sec", "--raw"); !strings.Contains(got, "SECRET-3") {
			t.Errorf("--raw: %s", got)
		}
		if got := r.remote("", "tasks", "list", "--raw", "--with-payload", "-o", "json"); got.code != 0 || !strings.Contains(got.stdout, "SECRET-2") {
			t.Errorf("--raw over --server: %+v", got)
		}
		var shown struct{ Events []bt.Event }
		e.json(&shown, "tasks", "show", "sec")
		var viewers []string
		for _, ev := range shown.Events {
			if ev.Type == backstop.EventPayloadViewed {
				viewers = append(viewers, ev.Actor+" "+string(ev.Body))
			}
		}
		if len(viewers) != 2 || !strings.Contains(viewers[0], "cli tasks show") || !strings.HasPrefix(viewers[1], "admin-token ") {
			t.Errorf("audit events: %q", viewers)
		}
		v := newRemoteEnv(t, e, "viewer")
		if got := v.remote("", "tasks", "show", "sec", "--raw"); got.code != ExitFailure || !strings.Contains(got.stderr, "403") {
			t.Errorf("viewer --raw: %+v", got)
		}
	})
}
