package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
)

// cliEnv runs the CLI in-process against one database.
type cliEnv struct {
	t  *testing.T
	db string
}

type cliResult struct {
	code           int
	stdout, stderr string
}

// run runs `backstop --db DB args...` with stdin.
func (e *cliEnv) run(stdin string, args ...string) cliResult {
	e.t.Helper()
	var out, errb bytes.Buffer
	code := Main(append([]string{"--db", e.db}, args...), strings.NewReader(stdin), &out, &errb)
	return cliResult{code: code, stdout: out.String(), stderr: errb.String()}
}

// ok runs a command that must succeed and returns its stdout.
func (e *cliEnv) ok(args ...string) string {
	e.t.Helper()
	r := e.run("", args...)
	if r.code != 0 {
		e.t.Fatalf("backstop %s: exit %d, stderr: %s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

// fails runs a command that must exit with code, naming want on stderr.
func (e *cliEnv) fails(code int, want string, args ...string) {
	e.t.Helper()
	r := e.run("", args...)
	if r.code != code || !strings.Contains(r.stderr, want) {
		e.t.Fatalf("backstop %s: exit %d, stderr %q; want exit %d naming %q", strings.Join(args, " "), r.code, r.stderr, code, want)
	}
}

// json runs a command with -o json and decodes its output into v.
func (e *cliEnv) json(v any, args ...string) {
	e.t.Helper()
	out := e.ok(append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		e.t.Fatalf("backstop %s -o json: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// taskOut is a task as the CLI prints it in JSON, with the enqueue result.
type taskOut struct {
	bt.Task
	Attributes map[string]string `json:"attributes"`
	Merged     *bool             `json:"merged"`
	Duplicate  *bool             `json:"duplicate"`
	Executions *[]bt.Execution   `json:"executions"`
	ReplayCnt  *int              `json:"replay_count"`
}

func (e *cliEnv) listIDs(args ...string) []string {
	e.t.Helper()
	var ts []taskOut
	e.json(&ts, append([]string{"tasks", "list"}, args...)...)
	ids := make([]string, len(ts))
	for i, t := range ts {
		ids[i] = t.ID
	}
	return ids
}

// compact is JSON without the CLI's indentation.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// forEachDB runs fn as a parallel subtest on SQLite and on PostgreSQL (the
// latter skips when no test server is configured).
func forEachDB(t *testing.T, fn func(t *testing.T, e *cliEnv)) {
	t.Helper()
	for _, db := range []struct {
		name string
		url  func(testing.TB) string
	}{{"sqlite", testdb.SQLite}, {"postgres", testdb.Postgres}} {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			fn(t, &cliEnv{t: t, db: db.url(t)})
		})
	}
}

func TestEnqueueEveryFlagRoundTrips(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		var got taskOut
		e.json(&got, "enqueue", "--queue", "mail", "--kind", "send_email", "--id", "order-42",
			"--payload", `{"to":"a@example.com","n":[1,2]}`, "--max-attempts", "7",
			"--retry-schedule", "1s,20s,5m", "--timeout", "45s", "--deadline", "2040-01-02T03:04:05Z",
			"--run-at", "2039-05-06T07:08:09.5Z", "--attr", "tenant=acme", "--attr", "run_id=r=1",
			"--idempotency-key", "idem-1", "--merge-key", "merge-1", "--priority", "-5",
			"--total-steps", "12", "--complexity", "3.25")
		if got.Merged == nil || *got.Merged || got.Duplicate == nil || *got.Duplicate {
			t.Errorf("enqueue: merged=%v duplicate=%v, want both present and false", got.Merged, got.Duplicate)
		}
		var shown taskOut
		e.json(&shown, "tasks", "show", "order-42")
		for _, tk := range []taskOut{got, shown} {
			checks := []struct {
				field     string
				got, want any
			}{
				{"id", tk.ID, "order-42"},
				{"queue", tk.Queue, "mail"},
				{"kind", tk.Kind, "send_email"},
				{"state", tk.State, bt.StateScheduled},
				{"max_attempts", tk.MaxAttempts, 7},
				{"priority", tk.Priority, -5},
				{"timeout", time.Duration(tk.Timeout), 45 * time.Second},
				{"run_at", tk.RunAt, time.Date(2039, 5, 6, 7, 8, 9, 5e8, time.UTC)},
				{"deadline", *tk.Deadline, time.Date(2040, 1, 2, 3, 4, 5, 0, time.UTC)},
				{"attributes", fmt.Sprint(tk.Attributes), "map[run_id:r=1 tenant:acme]"},
				{"idempotency_key", tk.IdempotencyKey, "idem-1"},
				{"merge_key", tk.MergeKey, "merge-1"},
				{"progress", tk.Progress, bt.Progress{Total: 12}},
				{"complexity", tk.Complexity, 3.25},
				{"retry", fmt.Sprint(tk.Retry.Schedule), "[1s 20s 5m0s]"},
			}
			for _, c := range checks {
				if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
					t.Errorf("%s = %v, want %v", c.field, c.got, c.want)
				}
			}
			var payload map[string]any
			if err := json.Unmarshal(tk.Payload, &payload); err != nil || payload["to"] != "a@example.com" {
				t.Errorf("payload = %s (%v)", tk.Payload, err)
			}
		}
		if shown.Executions == nil || len(*shown.Executions) != 0 {
			t.Errorf("tasks show: executions = %v, want an empty array", shown.Executions)
		}

		// Table mode prints the id alone; --delay schedules relative to now.
		out := e.ok("enqueue", "--queue", "mail", "--kind", "send_email", "--delay", "1h", "--payload-file", "-")
		id := strings.TrimSpace(out)
		var delayed taskOut
		e.json(&delayed, "tasks", "show", id)
		if d := time.Until(delayed.RunAt); delayed.State != bt.StateScheduled || d < 59*time.Minute || d > 61*time.Minute {
			t.Errorf("--delay 1h: state %s, run_at in %s", delayed.State, d)
		}
		if compact(delayed.Payload) != "{}" {
			t.Errorf("empty --payload-file: payload %s, want {}", delayed.Payload)
		}
		r := e.run(`{"from":"stdin"}`, "enqueue", "--queue", "mail", "--kind", "k", "--payload-file", "-", "-o", "json")
		if r.code != 0 || !strings.Contains(r.stdout, `"from": "stdin"`) {
			t.Errorf("--payload-file -: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
		}
	})
}

func TestEnqueueBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	payloadFile := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(payloadFile, []byte(`{"a":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"enqueue", "--queue", "q", "--kind", "k"}
	cases := []struct {
		name string
		args []string
		want string // the field or flag the message must name
	}{
		{"payload not JSON", []string{"--payload", "{bad"}, "payload"},
		{"payload file missing", []string{"--payload-file", "/nonexistent/p.json"}, "--payload-file"},
		{"payload twice", []string{"--payload", "{}", "--payload-file", payloadFile}, "--payload-file"},
		{"attr without =", []string{"--attr", "tenant"}, "--attr"},
		{"attr bad key", []string{"--attr", "9lives=x"}, "--attr"},
		{"attr twice", []string{"--attr", "a=1", "--attr", "a=2"}, "--attr"},
		{"negative attempts", []string{"--max-attempts", "-1"}, "max_attempts"},
		{"bad schedule", []string{"--retry-schedule", "1s,,2s"}, "--retry-schedule"},
		{"negative schedule", []string{"--retry-schedule", "-1s"}, "--retry-schedule"},
		{"bad timeout", []string{"--timeout", "soon"}, "--timeout"},
		{"negative timeout", []string{"--timeout", "-1s"}, "timeout"},
		{"bad run-at", []string{"--run-at", "tomorrow"}, "--run-at"},
		{"delay and run-at", []string{"--delay", "1s", "--run-at", "2040-01-01T00:00:00Z"}, "--run-at"},
		{"past deadline", []string{"--deadline", "2001-01-01T00:00:00Z"}, "deadline"},
		{"bad id", []string{"--id", "has space"}, "id"},
		{"priority range", []string{"--priority", "99999"}, "priority"},
		{"negative complexity", []string{"--complexity", "-1"}, "complexity"},
		{"negative sequence", []string{"--ordering-key", "k", "--sequence", "-1"}, "sequence"},
		{"sequence without a key", []string{"--sequence", "3"}, "sequence"},
		{"bad merge rule", []string{"--merge-key", "m", "--merge-rule", "zip"}, "--merge-rule"},
		{"progress", []string{"--total-steps", "-2"}, "progress"},
		{"bad queue name", []string{"--queue", "no spaces"}, "queue"},
		{"unknown flag", []string{"--colour", "red"}, "colour"},
		{"batch and task flags", []string{"--batch-file", payloadFile}, "--queue"},
		{"output format", []string{"-o", "yaml"}, "-o"},
	}
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		for _, c := range cases {
			r := e.run("", append(append([]string{}, base...), c.args...)...)
			if r.code != ExitUsage || !strings.Contains(r.stderr, c.want) {
				t.Errorf("%s: exit %d, stderr %q; want exit 2 naming %q", c.name, r.code, r.stderr, c.want)
			}
		}
		e.fails(ExitUsage, "--kind", "enqueue", "--queue", "q")
		e.fails(ExitUsage, "--queue", "enqueue", "--kind", "k")
		if ids := e.listIDs(); len(ids) != 0 {
			t.Fatalf("bad input wrote tasks: %v", ids)
		}
	})
}

func TestNotFoundAndConflictExitCodes(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		e.fails(ExitNotFound, "not found", "tasks", "show", "nope")
		e.fails(ExitNotFound, "not found", "tasks", "cancel", "nope")
		e.fails(ExitNotFound, "not found", "dlq", "show", "nope")

		e.ok("enqueue", "--queue", "q", "--kind", "k", "--id", "t1")
		e.fails(ExitConflict, "t1", "enqueue", "--queue", "q", "--kind", "k", "--id", "t1")
		e.fails(ExitNotFound, "not a dead letter", "dlq", "show", "t1")

		var canceled taskOut
		e.json(&canceled, "tasks", "cancel", "t1")
		if canceled.State != bt.StateCanceled {
			t.Errorf("cancel: state %s, want canceled", canceled.State)
		}
		e.fails(ExitConflict, "canceled", "tasks", "cancel", "t1")

		e.fails(ExitUsage, "", "tasks", "show")
		e.fails(ExitUsage, "", "tasks", "show", "a", "b")
		e.fails(ExitUsage, "state", "tasks", "list", "--state", "sleeping")
		e.fails(ExitUsage, "reason", "dlq", "list", "--reason", "bored")
		e.fails(ExitUsage, "--limit", "tasks", "list", "--limit", "0")
		e.fails(ExitUsage, "--attr", "dlq", "list", "--attr", "x")
	})
}

func TestIdempotencyKeyReturnsTheSameTask(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		first := strings.TrimSpace(e.ok("enqueue", "--queue", "q", "--kind", "k", "--idempotency-key", "once"))
		r := e.run("", "enqueue", "--queue", "q", "--kind", "k", "--idempotency-key", "once", "--payload", `{"x":2}`)
		if r.code != 0 || strings.TrimSpace(r.stdout) != first || !strings.Contains(r.stderr, "duplicate") {
			t.Fatalf("second enqueue: exit %d, id %q (first %q), stderr %q", r.code, r.stdout, first, r.stderr)
		}
		var again taskOut
		e.json(&again, "enqueue", "--queue", "q", "--kind", "k", "--idempotency-key", "once")
		if again.ID != first || again.Duplicate == nil || !*again.Duplicate {
			t.Errorf("json: id %s duplicate %v; want %s, true", again.ID, again.Duplicate, first)
		}
		if ids := e.listIDs(); len(ids) != 1 {
			t.Errorf("tasks = %v, want one", ids)
		}
	})
}

func TestMergeKey(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		var first, second, third taskOut
		e.json(&first, "enqueue", "--queue", "q", "--kind", "recalc", "--merge-key", "doc-1", "--payload", `{"v":1}`, "--delay", "1h")
		e.json(&second, "enqueue", "--queue", "q", "--kind", "recalc", "--merge-key", "doc-1", "--payload", `{"v":2}`)
		if second.ID != first.ID || second.Merged == nil || !*second.Merged || compact(second.Payload) != `{"v":2}` {
			t.Fatalf("replace merge: id %s (want %s) merged %v payload %s", second.ID, first.ID, second.Merged, second.Payload)
		}
		// append: the payload becomes the list of merged payloads.
		for v := 1; v <= 3; v++ {
			e.json(&third, "enqueue", "--queue", "q", "--kind", "recalc", "--merge-key", "doc-2",
				"--payload", fmt.Sprintf(`{"v":%d}`, v), "--merge-rule", "append", "--delay", "1h")
		}
		if third.Merged == nil || !*third.Merged || compact(third.Payload) != `[{"v":1},{"v":2},{"v":3}]` || third.MergeCount != 2 {
			t.Fatalf("append merge: merged %v payload %s merge_count %d", third.Merged, third.Payload, third.MergeCount)
		}
		r := e.run("", "enqueue", "--queue", "q", "--kind", "recalc", "--merge-key", "doc-1")
		if r.code != 0 || strings.TrimSpace(r.stdout) != first.ID || !strings.Contains(r.stderr, "merged") {
			t.Errorf("table merge: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
	})
}

func TestBatchFile(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		dir := t.TempDir()
		write := func(name string, lines ...string) string {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}
		good := `{"queue":"q","kind":"k","payload":{"n":1}}`

		// A syntax error, an unknown key, and a value the library refuses,
		// each on line 3: exit 2 naming line 3, nothing written.
		for _, bad := range []struct{ line, want string }{
			{`{"queue":"q","kind":`, "incomplete"},
			{`{"queue":"q","kind":"k","colour":"red"}`, `unknown key "colour"`},
			{`{"queue":"q","kind":"k","max_attempts":-1}`, "max_attempts"},
			{`{"queue":"q","kind":"k","delay":"soon"}`, "delay"},
		} {
			f := write("bad.ndjson", good, good, bad.line, good)
			r := e.run("", "enqueue", "--batch-file", f)
			if r.code != ExitUsage || !strings.Contains(r.stderr, "line 3") || !strings.Contains(r.stderr, bad.want) {
				t.Errorf("bad line %s: exit %d, stderr %q; want exit 2 naming line 3 and %q", bad.line, r.code, r.stderr, bad.want)
			}
		}
		// A bad record past the first batch of 1000: still nothing written.
		lines := make([]string, 1500)
		for i := range lines {
			lines[i] = fmt.Sprintf(`{"queue":"q","kind":"k","id":"b-%04d"}`, i)
		}
		lines[1299] = `{"queue":"q","kind":"no spaces"}`
		r := e.run("", "enqueue", "--batch-file", write("late.ndjson", lines...))
		if r.code != ExitUsage || !strings.Contains(r.stderr, "line 1300") || !strings.Contains(r.stderr, "kind") {
			t.Errorf("bad line 1300: exit %d, stderr %q", r.code, r.stderr)
		}
		// The same id twice is a conflict found before writing.
		r = e.run("", "enqueue", "--batch-file", write("dup.ndjson", `{"queue":"q","kind":"k","id":"x"}`, good, `{"queue":"q","kind":"k","id":"x"}`))
		if r.code != ExitConflict || !strings.Contains(r.stderr, "line 3") {
			t.Errorf("duplicate id: exit %d, stderr %q", r.code, r.stderr)
		}
		if ids := e.listIDs(); len(ids) != 0 {
			t.Fatalf("bad batch files wrote %d tasks", len(ids))
		}

		// A good file, from stdin, with blank lines, a merge and a duplicate.
		lines[1299] = ""
		lines = append(lines,
			`{"queue":"q","kind":"k","idempotency_key":"i"}`, `{"queue":"q","kind":"k","idempotency_key":"i"}`,
			`{"queue":"q","kind":"m","merge_key":"mk","delay":"1h","payload":{"v":1}}`,
			`{"queue":"q","kind":"m","merge_key":"mk","payload":{"v":2},"attributes":{"a":"b"}}`)
		var sum batchSummary
		r = e.run(strings.Join(lines, "\n"), "enqueue", "--batch-file", "-", "-o", "json")
		if r.code != 0 {
			t.Fatalf("good batch: exit %d, stderr %s", r.code, r.stderr)
		}
		if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil {
			t.Fatal(err)
		}
		if want := (batchSummary{Records: 1503, Enqueued: 1501, Merged: 1, Duplicate: 1}); sum != want {
			t.Errorf("summary %+v, want %+v", sum, want)
		}
		if ids := e.listIDs("--limit", "10000"); len(ids) != 1501 {
			t.Errorf("%d tasks written, want 1501", len(ids))
		}
		// Enqueueing the same ids again conflicts (exit 4) and says what was written.
		r = e.run("", "enqueue", "--batch-file", write("again.ndjson", `{"queue":"q","kind":"k","id":"b-0001"}`))
		if r.code != ExitConflict || !strings.Contains(r.stderr, "b-0001") {
			t.Errorf("existing id: exit %d, stderr %q", r.code, r.stderr)
		}
	})
}

func TestTasksListFilters(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		e.ok("enqueue", "--queue", "a", "--kind", "x", "--id", "t1", "--attr", "tenant=acme")
		e.ok("enqueue", "--queue", "a", "--kind", "y", "--id", "t2", "--attr", "tenant=globex", "--delay", "1h")
		e.ok("enqueue", "--queue", "b", "--kind", "x", "--id", "t3", "--attr", "tenant=acme", "--attr", "plan=p1")
		for _, c := range []struct {
			args []string
			want string
		}{
			{nil, "[t1 t2 t3]"},
			{[]string{"--queue", "a"}, "[t1 t2]"},
			{[]string{"--kind", "x"}, "[t1 t3]"},
			{[]string{"--state", "scheduled"}, "[t2]"},
			{[]string{"--state", "pending,scheduled"}, "[t1 t2 t3]"},
			{[]string{"--attr", "tenant=acme"}, "[t1 t3]"},
			{[]string{"--attr", "tenant=acme", "--attr", "plan=p1"}, "[t3]"},
			{[]string{"--limit", "2"}, "[t1 t2]"},
			{[]string{"--limit", "2", "--after", "t2"}, "[t3]"},
		} {
			if got := fmt.Sprint(e.listIDs(c.args...)); got != c.want {
				t.Errorf("tasks list %v = %s, want %s", c.args, got, c.want)
			}
		}
		r := e.run("", "tasks", "list", "--limit", "2")
		if r.code != 0 || !strings.Contains(r.stdout, "STATE") || !strings.Contains(r.stdout, "t2") || !strings.Contains(r.stderr, "--after t2") {
			t.Errorf("table list: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
	})
}

// runUntil runs a library worker on queue q with handler h until cond.
func runUntil(t *testing.T, url, queue string, h backstop.HandlerFunc, cond func(*backstop.Client) bool) {
	t.Helper()
	ctx := context.Background()
	s, err := dburl.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := backstop.NewClient(s, &backstop.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w, err := backstop.NewWorker(c, &backstop.WorkerConfig{ID: "test-worker", Queues: map[string]int{queue: 2},
		PollInterval: 20 * time.Millisecond, MaintenanceInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("boom", h)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stop, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := w.Stop(stop); err != nil {
			t.Error(err)
		}
	}()
	testwait.For(t, "the worker to reach the expected state", func() bool { return cond(c) })
}

func TestDeadLetters(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		e.ok("enqueue", "--queue", "q", "--kind", "boom", "--id", "perm", "--attr", "tenant=acme")
		e.ok("enqueue", "--queue", "q", "--kind", "boom", "--id", "flaky", "--max-attempts", "2", "--retry-schedule", "10ms")
		e.ok("enqueue", "--queue", "q", "--kind", "boom", "--id", "fine")
		runUntil(t, e.db, "q", func(ctx context.Context, task *backstop.Task) error {
			switch task.ID {
			case "perm":
				backstop.RecordDetail(ctx, "line one\nline two")
				return backstop.Permanent(fmt.Errorf("card declined"))
			case "flaky":
				return fmt.Errorf("upstream 503 on attempt %d", task.Attempt)
			}
			return nil
		}, func(c *backstop.Client) bool {
			dead, err := c.DeadLetters(context.Background(), backstop.ListParams{})
			return err == nil && len(dead) == 2
		})

		var dead []taskOut
		e.json(&dead, "dlq", "list")
		if len(dead) != 2 || dead[0].ID != "flaky" || dead[1].ID != "perm" {
			t.Fatalf("dlq list = %+v, want flaky and perm", dead)
		}
		for _, d := range dead {
			if d.DeadCount != 1 || d.FirstSeen == nil || d.LastSeen == nil || d.ReplayCnt == nil || *d.ReplayCnt != 0 {
				t.Errorf("%s: dead_count %d first_seen %v last_seen %v replay_count %v", d.ID, d.DeadCount, d.FirstSeen, d.LastSeen, d.ReplayCnt)
			}
		}
		if dead[0].DeadReason != bt.ReasonAttemptsExhausted || dead[1].DeadReason != bt.ReasonPermanentError {
			t.Errorf("reasons %s, %s", dead[0].DeadReason, dead[1].DeadReason)
		}
		var filtered []taskOut
		e.json(&filtered, "dlq", "list", "--reason", "permanent_error", "--attr", "tenant=acme")
		if len(filtered) != 1 || filtered[0].ID != "perm" {
			t.Errorf("dlq list --reason --attr = %v", filtered)
		}
		e.json(&filtered, "dlq", "list", "--kind", "other")
		if len(filtered) != 0 {
			t.Errorf("dlq list --kind other = %v", filtered)
		}

		var shown taskOut
		e.json(&shown, "dlq", "show", "flaky")
		if shown.Executions == nil || len(*shown.Executions) != 2 {
			t.Fatalf("dlq show flaky: executions %v, want 2", shown.Executions)
		}
		for i, x := range *shown.Executions {
			if x.Attempt != i+1 || x.Outcome != bt.OutcomeTransientError || x.WorkerID != "test-worker" ||
				x.FinishedAt == nil || !strings.Contains(x.Error, "upstream 503") || x.ExecutionID == "" {
				t.Errorf("execution %d = %+v", i, x)
			}
		}
		table := e.ok("dlq", "show", "perm")
		for _, want := range []string{"reason:", "permanent_error", "dead_count:", "card declined", "EXECUTION_ID", "| line two"} {
			if !strings.Contains(table, want) {
				t.Errorf("dlq show perm (table) lacks %q:\n%s", want, table)
			}
		}
		table = e.ok("dlq", "list")
		for _, want := range []string{"REASON", "attempts_exhausted", "DEAD_COUNT"} {
			if !strings.Contains(table, want) {
				t.Errorf("dlq list (table) lacks %q:\n%s", want, table)
			}
		}
		table = e.ok("tasks", "show", "flaky")
		for _, want := range []string{"executions (2)", "transient_error", "test-worker", "DURATION"} {
			if !strings.Contains(table, want) {
				t.Errorf("tasks show flaky (table) lacks %q:\n%s", want, table)
			}
		}
		e.fails(ExitNotFound, "not a dead letter", "dlq", "show", "fine")
		e.fails(ExitConflict, "succeeded", "tasks", "cancel", "fine")
		if got := fmt.Sprint(e.listIDs("--state", "dead")); got != "[flaky perm]" {
			t.Errorf("tasks list --state dead = %s", got)
		}
	})
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		var before []migrationJSON
		e.json(&before, "migrate", "status")
		if len(before) == 0 {
			t.Fatal("migrate status lists no migrations")
		}
		for _, m := range before {
			if m.State != "pending" || m.AppliedAt != nil {
				t.Errorf("before migrate: %+v, want pending", m)
			}
		}
		var res struct {
			Applied []migrationJSON `json:"applied"`
			Version int64           `json:"version"`
		}
		e.json(&res, "migrate")
		if len(res.Applied) != len(before) || res.Version != before[len(before)-1].Version {
			t.Errorf("migrate applied %+v (version %d), want all %d", res.Applied, res.Version, len(before))
		}
		e.json(&res, "migrate")
		if len(res.Applied) != 0 {
			t.Errorf("second migrate applied %+v", res.Applied)
		}
		status := e.ok("migrate", "status")
		if !strings.Contains(status, "APPLIED_AT") || strings.Contains(status, "pending") {
			t.Errorf("migrate status after migrate:\n%s", status)
		}
	})
}

func TestDemo(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		args := []string{"demo", "--tasks", "40"}
		if strings.HasPrefix(e.db, "postgres") {
			args = append(args, "--fresh=false")
		}
		var rep demoReport
		e.json(&rep, args...)
		if rep.Tasks != 40 || rep.Succeeded == 0 || rep.SucceededAfterRetries == 0 || rep.Succeeded+rep.Dead != 40 {
			t.Errorf("report: %+v", rep)
		}
		for _, r := range []bt.DeadReason{bt.ReasonAttemptsExhausted, bt.ReasonPermanentError, bt.ReasonPoison} {
			if rep.DeadByReason[r] == 0 {
				t.Errorf("no dead letter with reason %s: %v", r, rep.DeadByReason)
			}
		}
		if rep.AttemptsByOutcome[bt.OutcomeTransientError] == 0 || rep.AttemptsByOutcome[bt.OutcomeTimeout] == 0 {
			t.Errorf("attempts by outcome: %v", rep.AttemptsByOutcome)
		}
		// The commands the report suggests work.
		var showedDead bool
		for _, cmd := range rep.Commands {
			fields := strings.Fields(cmd)
			if len(fields) < 4 || fields[0] != "backstop" || fields[1] != "--db" {
				t.Fatalf("command %q", cmd)
			}
			r := e.run("", fields[3:]...)
			if r.code != 0 || r.stdout == "" {
				t.Errorf("%s: exit %d, stderr %s", cmd, r.code, r.stderr)
			}
			showedDead = showedDead || strings.Contains(cmd, "dlq show")
		}
		if !showedDead {
			t.Errorf("no dlq show among %v", rep.Commands)
		}

		table := e.ok(args...)
		for _, want := range []string{"succeeded", "dead letters", "attempts by outcome", "poison", "dlq show", "tasks show"} {
			if !strings.Contains(table, want) {
				t.Errorf("demo report lacks %q:\n%s", want, table)
			}
		}
	})
}

func TestDemoFreshRefusesOtherDatabases(t *testing.T) {
	t.Parallel()
	e := &cliEnv{t: t, db: testdb.SQLite(t)}
	e.ok("enqueue", "--queue", "payments", "--kind", "k", "--id", "precious")
	e.fails(ExitConflict, "not deleting", "demo", "--tasks", "1")
	e.ok("tasks", "show", "precious")

	// A previous demo database is replaced.
	demo := &cliEnv{t: t, db: testdb.SQLite(t)}
	demo.ok("demo", "--tasks", "5")
	demo.ok("demo", "--tasks", "5")
	if ids := demo.listIDs(); len(ids) != 5 {
		t.Errorf("after two fresh demos: %d tasks, want 5", len(ids))
	}
	demo.fails(ExitUsage, "--tasks", "demo", "--tasks", "0")
}

func TestEnqueueOrderingKey(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		e.ok("enqueue", "--queue", "results", "--kind", "check", "--id", "r-1", "--ordering-key", "sub-1", "--sequence", "60000")
		var shown taskOut
		e.json(&shown, "tasks", "show", "r-1")
		if shown.OrderingKey != "sub-1" || shown.Sequence != 60000 || shown.State != bt.StateBuffered {
			t.Fatalf("tasks show: ordering_key %q sequence %d state %s; want sub-1 60000 buffered",
				shown.OrderingKey, shown.Sequence, shown.State)
		}
	})
}
