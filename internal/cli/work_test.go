package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/cli"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testdb"
)

// execMain runs the CLI in-process and returns its exit code and output.
func execMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Main(args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func workClient(t *testing.T, url string) *backstop.Client {
	t.Helper()
	ctx := context.Background()
	s, err := dburl.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := backstop.NewClient(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestWorkUsageErrors(t *testing.T) {
	t.Parallel()
	db := testdb.SQLite(t)
	for name, args := range map[string][]string{
		"no queue":          {"work", "--", "true"},
		"no command":        {"work", "--queue", "q"},
		"tempfail as perm":  {"work", "--queue", "q", "--permanent-exit-codes", "75", "--", "true"},
		"bad exit code":     {"work", "--queue", "q", "--permanent-exit-codes", "x", "--", "true"},
		"short lease":       {"work", "--queue", "q", "--lease", "100ms", "--", "true"},
		"zero concurrency":  {"work", "--queue", "q", "--concurrency", "0", "--", "true"},
		"unknown program":   {"work", "--queue", "q", "--", "no-such-program-backstop"},
		"invalid queue":     {"work", "--queue", "bad queue!", "--", "true"},
		"negative idle":     {"work", "--queue", "q", "--exit-after-idle", "-1s", "--", "true"},
		"negative prefetch": {"work", "--queue", "q", "--prefetch", "-1", "--", "true"},
		"bench n and dur":   {"bench", "-n", "10", "--duration", "1s"},
		"bench rate no dur": {"bench", "--rate", "100"},
		"bench workers 0":   {"bench", "-n", "10", "--workers", "0"},
	} {
		code, _, stderr := execMain(t, append([]string{"--db", db}, args...)...)
		if code != cli.ExitUsage {
			t.Errorf("%s: exit %d, want %d (stderr %q)", name, code, cli.ExitUsage, stderr)
		}
	}
}

// TestWorkRunsTasks runs `backstop work` in-process until it is idle:
// every kind is handled without --kind, exit codes classify, and the logs
// are JSON lines.
func TestWorkRunsTasks(t *testing.T) {
	t.Parallel()
	db := testdb.SQLite(t)
	c := workClient(t, db)
	ctx := context.Background()
	res, err := c.EnqueueMany(ctx, []backstop.EnqueueParams{
		{Queue: "q", Kind: "ok", Payload: []byte(`{"x":1}`), Attributes: map[string]string{"run_id": "r1"}},
		{Queue: "q", Kind: "perm", MaxAttempts: 5},
		{Queue: "q2", Kind: "other"},
	})
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := execMain(t, "--db", db, "work", "--queue", "q", "--queue", "q2", "--concurrency", "2",
		"--permanent-exit-codes", "65,100", "--exit-after-idle", "500ms", "--",
		"sh", "-c", `read p; echo "$p $BACKSTOP_ATTR_RUN_ID"; [ "$BACKSTOP_KIND" = perm ] && exit 65; exit 0`)
	if code != 0 {
		t.Fatalf("work exited %d: %s", code, stderr)
	}
	want := []struct {
		state  bt.State
		detail string
	}{{bt.StateSucceeded, `{"x":1} r1`}, {bt.StateDead, "{}"}, {bt.StateSucceeded, "{}"}}
	for i, r := range res {
		task, err := c.Get(ctx, r.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if task.State != want[i].state || len(task.Executions) != 1 {
			t.Errorf("task %s: %s with %d executions, want %s after 1", task.Kind, task.State, len(task.Executions), want[i].state)
			continue
		}
		if d := task.Executions[0].ErrorDetail; !strings.HasPrefix(d, want[i].detail) {
			t.Errorf("task %s: output %q, want it to start with %q", task.Kind, d, want[i].detail)
		}
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	msgs := map[string]bool{}
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("stderr line %q is not JSON: %v", l, err)
		}
		msgs[rec["msg"].(string)] = true
	}
	for _, m := range []string{"worker started", "task dead-lettered", "worker draining", "worker stopped"} {
		if !msgs[m] {
			t.Errorf("no %q log line in:\n%s", m, stderr)
		}
	}
}

// TestWorkKindFilter: with --kind the worker claims only those kinds.
func TestWorkKindFilter(t *testing.T) {
	t.Parallel()
	db := testdb.SQLite(t)
	c := workClient(t, db)
	ctx := context.Background()
	res, err := c.EnqueueMany(ctx, []backstop.EnqueueParams{{Queue: "q", Kind: "mine"}, {Queue: "q", Kind: "theirs"}})
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := execMain(t, "--db", db, "work", "--queue", "q", "--kind", "mine", "--exit-after-idle", "300ms", "true") // no "--": flags end at the command
	if code != 0 {
		t.Fatalf("work exited %d: %s", code, stderr)
	}
	for i, want := range []bt.State{bt.StateSucceeded, bt.StatePending} {
		task, err := c.Get(ctx, res[i].Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if task.State != want {
			t.Errorf("task %s is %s, want %s", task.Kind, task.State, want)
		}
	}
}

var benchSummary = regexp.MustCompile(`^bench: worked=(\d+) elapsed=[0-9.]+s jobs_per_sec=[0-9.]+$`)

func TestBenchModes(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		"drain":      {"bench", "-n", "2000", "--workers", "20", "--batch", "300"},
		"continuous": {"bench", "--duration", "500ms", "--workers", "20", "--batch", "100"},
		"latency":    {"bench", "--rate", "200", "--duration", "500ms", "--workers", "10"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := execMain(t, append([]string{"--db", testdb.SQLite(t)}, args...)...)
			if code != 0 {
				t.Fatalf("bench exited %d: %s\n%s", code, stderr, stdout)
			}
			lines := strings.Split(strings.TrimSpace(stdout), "\n")
			m := benchSummary.FindStringSubmatch(lines[len(lines)-1])
			if m == nil {
				t.Fatalf("last line %q is not the summary", lines[len(lines)-1])
			}
			if name == "drain" && m[1] != "2000" {
				t.Errorf("drain worked %s tasks, want 2000", m[1])
			}
			if name == "drain" && !strings.Contains(stdout, "bench: drain cost in this process: allocs_per_task=") {
				t.Errorf("drain printed no cost line:\n%s", stdout)
			}
			if m[1] == "0" {
				t.Errorf("%s worked no task", name)
			}
			if name == "latency" && !strings.Contains(stdout, "p50=") {
				t.Errorf("latency mode printed no percentiles:\n%s", stdout)
			}
		})
	}
}
