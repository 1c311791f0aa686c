package execworker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/execworker"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store/sqlitestore"
)

func newHandler(t *testing.T, cfg execworker.Config) *execworker.Handler {
	t.Helper()
	h, err := execworker.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return h
}

func shell(script string) []string { return []string{"sh", "-c", script} }

func testTask() *backstop.Task {
	return &backstop.Task{
		ID: "task-1", Queue: "q1", Kind: "k1", Attempt: 2, ExecutionID: "exec-1",
		Payload: json.RawMessage(`{"hello":"world"}`),
	}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		script    string
		wantErr   bool
		permanent bool
		msg       string
	}{
		{name: "success", script: "exit 0"},
		{name: "tempfail", script: "exit 75", wantErr: true, msg: "code 75 (EX_TEMPFAIL"},
		{name: "permanent", script: "exit 65", wantErr: true, permanent: true, msg: "code 65"},
		{name: "other permanent", script: "exit 100", wantErr: true, permanent: true, msg: "code 100"},
		{name: "other code", script: "exit 3", wantErr: true, msg: "code 3"},
		{name: "signal", script: "kill -TERM $$", wantErr: true, msg: "killed by signal 15"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHandler(t, execworker.Config{Command: shell(tc.script), PermanentExitCodes: []int{65, 100}})
			r := h.Run(context.Background(), testTask())
			if (r.Err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error: %v", r.Err, tc.wantErr)
			}
			if r.Err == nil {
				return
			}
			if got := backstop.IsPermanent(r.Err); got != tc.permanent {
				t.Errorf("IsPermanent = %v, want %v (err %v)", got, tc.permanent, r.Err)
			}
			if !strings.Contains(r.Err.Error(), tc.msg) {
				t.Errorf("error %q does not say %q", r.Err, tc.msg)
			}
		})
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []execworker.Config{
		{},
		{Command: []string{"definitely-not-a-program-backstop"}},
		{Command: shell("true"), PermanentExitCodes: []int{75}},
		{Command: shell("true"), PermanentExitCodes: []int{0}},
		{Command: shell("true"), PermanentExitCodes: []int{256}},
	} {
		if _, err := execworker.New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded, want an error", cfg)
		}
	}
}

func TestEnvironmentAndStdin(t *testing.T) {
	t.Parallel()
	base := append(os.Environ(), "BACKSTOP_ATTR_STALE=from-parent", "BACKSTOP_TASK_ID=parent", "KEEP_ME=yes")
	h := newHandler(t, execworker.Config{
		Command: shell(`cat; echo; env | grep -E '^(BACKSTOP_|KEEP_ME=)' | sort`),
		Env:     base,
	})
	task := testTask()
	task.Attributes = map[string]string{"run_id": "r-42", "plan.hash-v2": "abc def"}
	r := h.Run(context.Background(), task)
	if r.Err != nil {
		t.Fatalf("Run: %v\n%s", r.Err, r.Output)
	}
	lines := strings.Split(strings.TrimSpace(r.Output), "\n")
	if lines[0] != `{"hello":"world"}` {
		t.Errorf("stdin seen by the child = %q, want the payload", lines[0])
	}
	got := map[string]bool{}
	for _, l := range lines[1:] {
		got[l] = true
	}
	for _, want := range []string{
		"BACKSTOP_TASK_ID=task-1", "BACKSTOP_ATTEMPT=2", "BACKSTOP_QUEUE=q1", "BACKSTOP_KIND=k1",
		"BACKSTOP_EXECUTION_ID=exec-1", "BACKSTOP_ATTR_RUN_ID=r-42", "BACKSTOP_ATTR_PLAN_HASH_V2=abc def",
		"KEEP_ME=yes",
	} {
		if !got[want] {
			t.Errorf("child environment lacks %q; got:\n%s", want, strings.Join(lines[1:], "\n"))
		}
	}
	if got["BACKSTOP_ATTR_STALE=from-parent"] || got["BACKSTOP_TASK_ID=parent"] {
		t.Errorf("child inherited the parent's task variables:\n%s", strings.Join(lines[1:], "\n"))
	}
}

func TestOrderingEnvironment(t *testing.T) {
	t.Parallel()
	h := newHandler(t, execworker.Config{Command: shell(`env | grep -E '^BACKSTOP_(ORDERING_KEY|SEQUENCE|GAPS)=' | sort`),
		Env: append(os.Environ(), "BACKSTOP_GAPS=inherited")})
	task := testTask()
	task.OrderingKey, task.Sequence, task.Gaps = "sub-1", 300, []backstop.Gap{{From: 120, To: 240}}
	r := h.Run(context.Background(), task)
	if r.Err != nil {
		t.Fatalf("Run: %v\n%s", r.Err, r.Output)
	}
	want := "BACKSTOP_GAPS=[{\"from\":120,\"to\":240}]\nBACKSTOP_ORDERING_KEY=sub-1\nBACKSTOP_SEQUENCE=300"
	if got := strings.TrimSpace(r.Output); got != want {
		t.Fatalf("ordering environment:\n%s\nwant:\n%s", got, want)
	}
}

func TestEnvName(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"run_id":       "BACKSTOP_ATTR_RUN_ID",
		"plan.hash":    "BACKSTOP_ATTR_PLAN_HASH",
		"a-b.c_D9":     "BACKSTOP_ATTR_A_B_C_D9",
		"_x":           "BACKSTOP_ATTR__X",
		"tenant.émile": "BACKSTOP_ATTR_TENANT__MILE",
	} {
		if got := execworker.EnvName(in); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", in, got, want)
		}
	}
}

// waitPID waits for a file to hold a number, and returns it.
func waitPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	testwait.For(t, path+" to hold a pid", func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	return pid
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) S ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	defer syscall.Kill(pid, syscall.SIGKILL) // a survivor must not outlive the test
	testwait.For(t, fmt.Sprintf("process %d to end with its task", pid), func() bool { return !alive(pid) })
}

func TestContextEndKillsProcessGroup(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
	h := newHandler(t, execworker.Config{
		Command: shell(`sleep 300 & echo $! > "$PID_FILE"; echo started; wait`),
		Env:     append(os.Environ(), "PID_FILE="+pidFile),
	})
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan execworker.Result, 1)
	go func() { done <- h.Run(ctx, testTask()) }()
	pid := waitPID(t, pidFile)
	if !alive(pid) {
		t.Fatalf("grandchild %d is not running before the timeout", pid)
	}
	cause := errors.New("task timeout (test)")
	cancel(cause)
	r := <-done
	if r.Err == nil || !errors.Is(r.Err, cause) || !strings.Contains(r.Err.Error(), "killed") {
		t.Errorf("err = %v, want a kill wrapping the context's cause", r.Err)
	}
	if r.ExitCode != -1 {
		t.Errorf("exit code = %d, want -1 (killed)", r.ExitCode)
	}
	if !strings.Contains(r.Output, "started") {
		t.Errorf("output %q lost what was written before the kill", r.Output)
	}
	waitGone(t, pid)
}

func TestExitKillsLeftoverGrandchildren(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
	h := newHandler(t, execworker.Config{
		Command: shell(`sleep 300 & echo $! > "$PID_FILE"; exit 0`),
		Env:     append(os.Environ(), "PID_FILE="+pidFile),
	})
	r := h.Run(context.Background(), testTask())
	if r.Err != nil {
		t.Fatalf("Run: %v", r.Err)
	}
	waitGone(t, waitPID(t, pidFile))
}

func TestOutputTailIsBounded(t *testing.T) {
	t.Parallel()
	h := newHandler(t, execworker.Config{
		Command:     shell(`i=0; while [ $i -lt 2000 ]; do echo "line $i of noise"; i=$((i+1)); done; echo LAST >&2; exit 3`),
		OutputLimit: 1024,
	})
	r := h.Run(context.Background(), testTask())
	if r.Err == nil {
		t.Fatal("want exit code 3")
	}
	if !strings.HasPrefix(r.Output, "…truncated (") {
		t.Errorf("output does not start with the truncation marker: %.80q", r.Output)
	}
	if !strings.HasSuffix(r.Output, "line 1999 of noise\nLAST\n") {
		t.Errorf("output does not end with the last lines: %q", r.Output[max(0, len(r.Output)-80):])
	}
	if len(r.Output) > 1024+100 {
		t.Errorf("output is %d bytes, want at most the 1 KiB limit plus the marker", len(r.Output))
	}
}

func TestOutputIsValidText(t *testing.T) {
	t.Parallel()
	h := newHandler(t, execworker.Config{
		Command:     shell(`printf 'a\000b\377c'; printf 'ééééé'`),
		OutputLimit: 7,
	})
	r := h.Run(context.Background(), testTask())
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	body := r.Output[strings.Index(r.Output, "\n")+1:]
	if strings.ContainsRune(body, 0) || !strings.HasSuffix(body, "ééé") || strings.Contains(body, "\uFFFDé") {
		t.Errorf("output %q: want the last whole characters, no NUL", r.Output)
	}
	h = newHandler(t, execworker.Config{Command: shell(`printf 'a\000b\377c'`)})
	if r := h.Run(context.Background(), testTask()); r.Output != "a\uFFFDb\uFFFDc" {
		t.Errorf("output = %q, want NUL and invalid bytes replaced", r.Output)
	}
}

// TestWithWorker runs the handler under a real worker on SQLite: the output
// tail becomes the execution's error_detail, and a task timeout kills it.
func TestWithWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlitestore.Open(strings.TrimPrefix(testdb.SQLite(t), "sqlite://"))
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
	h := newHandler(t, execworker.Config{
		Command: shell(`echo "oops from $BACKSTOP_KIND" >&2; if [ "$BACKSTOP_KIND" = slow ]; then exec sleep 300; fi; exit 3`),
	})
	w, err := backstop.NewWorker(c, &backstop.WorkerConfig{Queues: map[string]int{"q": 2}, Lease: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w.HandleDefault(h)
	res, err := c.EnqueueMany(ctx, []backstop.EnqueueParams{
		{Queue: "q", Kind: "fails", MaxAttempts: 1},
		{Queue: "q", Kind: "slow", MaxAttempts: 1, Timeout: 300 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stop, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		w.Stop(stop)
	}()
	want := map[string]bt.Outcome{res[0].Task.ID: bt.OutcomeTransientError, res[1].Task.ID: bt.OutcomeTimeout}
	for id, outcome := range want {
		var task *backstop.Task
		testwait.For(t, "task "+id+" to be dead", func() bool {
			task, err = c.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			return task.State == bt.StateDead
		})
		if task.State != bt.StateDead || len(task.Executions) != 1 {
			t.Fatalf("task %s: state %s with %d executions, want dead after 1", task.Kind, task.State, len(task.Executions))
		}
		e := task.Executions[0]
		if e.Outcome != outcome {
			t.Errorf("task %s: outcome %s, want %s (error %q)", task.Kind, e.Outcome, outcome, e.Error)
		}
		if !strings.Contains(e.ErrorDetail, "oops from "+task.Kind) {
			t.Errorf("task %s: error_detail %q lacks the program's output", task.Kind, e.ErrorDetail)
		}
		if task.Kind == "fails" && !strings.Contains(e.Error, "exited with code 3") {
			t.Errorf("error %q does not name the exit code", e.Error)
		}
	}
}
