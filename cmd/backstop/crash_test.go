package main

// Crash and drain tests with real processes: a `backstop work` binary is
// killed (SIGKILL) or drained (SIGTERM) in the middle of its tasks, and the
// store must show DESIGN.md's invariants 1-3: no task lost, a task runs again
// only after its lease expired or was released, and every attempt recorded,
// including the ones whose worker died. They run on SQLite and, under
// scripts/with-postgres, on PostgreSQL.
//
// They wait on conditions read from the store with generous deadlines and
// never assert how long anything took: a slow machine only makes them slower.

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/jackc/pgx/v5"
)

// binary is the backstop binary built for these tests.
var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	// These tests spend their time waiting on child processes, leases and
	// brokers, not on this process's CPU: run twice as many at once as
	// go test's default (GOMAXPROCS), unless -parallel says otherwise.
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		_ = flag.Set("test.parallel", strconv.Itoa(2*runtime.GOMAXPROCS(0)))
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "backstop-crash-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "backstop")
	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goCmd); err != nil {
		goCmd = "go"
	}
	build := exec.Command(goCmd, "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building backstop for the crash tests:", err)
		return 1
	}
	return m.Run()
}

// stores are the databases every test runs on.
var stores = []struct {
	name string
	url  func(testing.TB) string
}{
	{"sqlite", testdb.SQLite},
	{"postgres", testdb.Postgres},
}

const (
	queue = "crash"
	// taskScript is each task's program. TASK_SLEEP (set per worker
	// process) is how long a task takes; every run that finishes appends
	// "task_id attempt execution_id" to RUN_LOG; PID_DIR collects the
	// pids of the programs, to check that none outlives its worker.
	taskScript = `echo $$ > "$PID_DIR/$BACKSTOP_EXECUTION_ID"; sleep "$TASK_SLEEP"; ` +
		`echo "$BACKSTOP_TASK_ID $BACKSTOP_ATTEMPT $BACKSTOP_EXECUTION_ID" >> "$RUN_LOG"`
	// waitLong bounds every wait; only a broken engine reaches it.
	waitLong = 2 * time.Minute
)

type bundle struct {
	t      *testing.T
	url    string
	dir    string
	runLog string
	pidDir string
	client *backstop.Client
	ids    []string
}

func setup(t *testing.T, url string, tasks int) *bundle {
	t.Helper()
	ctx := context.Background()
	_, c := storeClient(t, url)
	dir := t.TempDir()
	b := &bundle{t: t, url: url, dir: dir, runLog: filepath.Join(dir, "runs.log"),
		pidDir: filepath.Join(dir, "pids"), client: c}
	if err := os.Mkdir(b.pidDir, 0o755); err != nil {
		t.Fatal(err)
	}
	b.enqueue(ctx, tasks)
	return b
}

// enqueue adds n tasks of the queue (to b.ids).
func (b *bundle) enqueue(ctx context.Context, n int) {
	b.t.Helper()
	params := make([]backstop.EnqueueParams, n)
	for i := range params {
		// Retry at once after a failure (a lease expiry) so the second
		// worker sees the reruns while it is still busy.
		params[i] = backstop.EnqueueParams{Queue: queue, Kind: "job", Payload: []byte(fmt.Sprintf(`{"n":%d}`, len(b.ids)+i)),
			Retry: &backstop.RetryPolicy{Schedule: []backstop.Duration{0}}}
	}
	res, err := b.client.EnqueueMany(ctx, params)
	if err != nil {
		b.t.Fatal(err)
	}
	for _, r := range res {
		b.ids = append(b.ids, r.Task.ID)
	}
}

// worker is one `backstop work` process, in a process group of its own.
type worker struct {
	cmd    *exec.Cmd
	stderr string
	done   chan struct{}
	err    error
	// app is the application_name of its PostgreSQL connections ("" on
	// SQLite), unique to the process.
	app string
}

// apps numbers the workers' PostgreSQL application names.
var apps atomic.Int64

func (b *bundle) startWorker(name, taskSleep string, args ...string) *worker {
	b.t.Helper()
	db, app := b.url, ""
	if !strings.HasPrefix(db, "sqlite://") {
		u, err := url.Parse(db)
		if err != nil {
			b.t.Fatal(err)
		}
		app = fmt.Sprintf("backstop-test-%d-%d", os.Getpid(), apps.Add(1))
		q := u.Query()
		q.Set("application_name", app)
		u.RawQuery = q.Encode()
		db = u.String()
	}
	full := append([]string{"--db", db, "work", "--queue", queue, "--concurrency", "4"}, args...)
	full = append(full, "--", "sh", "-c", taskScript)
	cmd := exec.Command(binary, full...)
	cmd.Env = append(os.Environ(), "TASK_SLEEP="+taskSleep, "RUN_LOG="+b.runLog, "PID_DIR="+b.pidDir)
	w := startProc(b.t, cmd, filepath.Join(b.dir, name+".stderr"), name, 0)
	w.app = app
	return w
}

// startProc starts cmd in a process group of its own with its output in
// stderrPath. At the end of the test it is killed: at once (grace 0), or
// SIGTERMed and killed after grace; a failed test logs its output's tail.
func startProc(t *testing.T, cmd *exec.Cmd, stderrPath, name string, grace time.Duration) *worker {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	w := &worker{cmd: cmd, stderr: stderrPath, done: make(chan struct{})}
	f, err := os.Create(w.stderr)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	go func() { w.err = cmd.Wait(); close(w.done) }()
	t.Cleanup(func() {
		select {
		case <-w.done:
		default:
			sig := syscall.SIGKILL
			if grace > 0 {
				sig = syscall.SIGTERM
			}
			_ = syscall.Kill(-cmd.Process.Pid, sig)
			select {
			case <-w.done:
			case <-time.After(cmp.Or(grace, waitLong)):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-w.done
			}
		}
		if t.Failed() {
			out, _ := os.ReadFile(w.stderr)
			lines := strings.Split(string(out), "\n")
			if len(lines) > 200 {
				lines = lines[len(lines)-200:]
			}
			t.Logf("%s stderr (last 200 lines at most):\n%s", name, strings.Join(lines, "\n"))
		}
	})
	return w
}

// wait waits for the process to exit and returns its exit code.
func (w *worker) wait(t *testing.T, what string) int {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(waitLong):
		t.Fatalf("%s: worker did not exit within %s", what, waitLong)
	}
	var ee *exec.ExitError
	if w.err != nil && !errors.As(w.err, &ee) {
		t.Fatalf("%s: %v", what, w.err)
	}
	return w.cmd.ProcessState.ExitCode()
}

// list reads every task of the queue in the given states, page by page.
func (b *bundle) list(states ...bt.State) []*backstop.Task {
	b.t.Helper()
	var all []*backstop.Task
	after := ""
	for {
		ts, err := b.client.List(context.Background(), backstop.ListParams{Queue: queue, States: states, AfterID: after, Limit: 5000})
		if err != nil {
			b.t.Fatal(err)
		}
		all = append(all, ts...)
		if len(ts) < 5000 {
			return all
		}
		after = ts[len(ts)-1].ID
	}
}

// waitUntil polls the store until cond holds (waitFor).
func (b *bundle) waitUntil(what string, cond func() bool) {
	b.t.Helper()
	testwait.For(b.t, what, cond)
}

// waitSettled returns once the killed worker w (its process exited) can
// change nothing more. On PostgreSQL a commit it sent just before dying may
// still be running on the server: it waits until the server ended w's
// backends, and with them every transaction of w (committed or rolled
// back). On SQLite a transaction ends with the process.
func (b *bundle) waitSettled(w *worker) {
	b.t.Helper()
	<-w.done
	if w.app == "" {
		return
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.url)
	if err != nil {
		b.t.Fatal(err)
	}
	defer conn.Close(ctx)
	b.waitUntil("the server to end the killed worker's connections", func() bool {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", w.app).Scan(&n); err != nil {
			b.t.Fatal(err)
		}
		return n == 0
	})
}

// running reads the running tasks.
func (b *bundle) running() map[string]*backstop.Task {
	b.t.Helper()
	m := map[string]*backstop.Task{}
	for _, t := range b.list(bt.StateRunning) {
		m[t.ID] = t
	}
	return m
}

func (b *bundle) get(id string) *backstop.Task {
	b.t.Helper()
	t, err := b.client.Get(context.Background(), id)
	if err != nil {
		b.t.Fatal(err)
	}
	return t
}

// runs reads the run log: for each task, the attempts that ran to the end.
func (b *bundle) runs() map[string][]string {
	b.t.Helper()
	out := map[string][]string{}
	f, err := os.Open(b.runLog)
	if errors.Is(err, os.ErrNotExist) {
		return out
	}
	if err != nil {
		b.t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			b.t.Fatalf("run log line %q: want task_id attempt execution_id", sc.Text())
		}
		out[fields[0]] = append(out[fields[0]], fields[1]+" "+fields[2])
	}
	if err := sc.Err(); err != nil {
		b.t.Fatal(err)
	}
	return out
}

// programsGone waits until every task program a worker started has exited.
func (b *bundle) programsGone() {
	b.t.Helper()
	entries, err := os.ReadDir(b.pidDir)
	if err != nil {
		b.t.Fatal(err)
	}
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(b.pidDir, e.Name()))
		if err != nil {
			b.t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil {
			continue // written but not flushed when read; its run is checked elsewhere
		}
		b.waitUntil(fmt.Sprintf("program %d of execution %s exited", pid, e.Name()), func() bool { return !alive(pid) })
	}
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// checkHistory checks invariants 1 and 3 for every task: it succeeded once,
// after attempts numbered 1..n, each recorded; uncharged outcomes
// (released) keep the attempt number of the next execution.
func (b *bundle) checkHistory() map[string]*backstop.Task {
	b.t.Helper()
	all := b.list()
	if len(all) != len(b.ids) {
		b.t.Fatalf("queue holds %d tasks, want the %d enqueued", len(all), len(b.ids))
	}
	got := map[string]*backstop.Task{}
	runs := b.runs()
	for _, id := range b.ids {
		task := b.get(id)
		got[id] = task
		if task.State != bt.StateSucceeded {
			b.t.Errorf("task %s is %s, want succeeded (last error %q)", id, task.State, task.LastError)
			continue
		}
		ex := task.Executions
		if len(ex) == 0 || ex[len(ex)-1].Outcome != bt.OutcomeSucceeded {
			b.t.Errorf("task %s: executions %s, want the last one succeeded", id, outcomes(ex))
			continue
		}
		want := 1
		for i, e := range ex {
			if e.Attempt != want {
				b.t.Errorf("task %s: execution %d is attempt %d, want %d (%s)", id, i+1, e.Attempt, want, outcomes(ex))
			}
			if e.FinishedAt == nil {
				b.t.Errorf("task %s: execution %s has no finish time", id, e.ExecutionID)
			}
			switch e.Outcome {
			case bt.OutcomeSucceeded:
				if i != len(ex)-1 {
					b.t.Errorf("task %s: succeeded before its last execution (%s)", id, outcomes(ex))
				}
			case bt.OutcomeLeaseExpired:
			case bt.OutcomeReleased:
				want-- // not charged: the next execution has the same number
			default:
				b.t.Errorf("task %s: unexpected outcome %s (%s)", id, e.Outcome, outcomes(ex))
			}
			want++
		}
		if task.Attempt != ex[len(ex)-1].Attempt {
			b.t.Errorf("task %s: attempt %d, want %d, the last execution's", id, task.Attempt, ex[len(ex)-1].Attempt)
		}
		// The program of the succeeded execution ran to its end, and no
		// attempt number ran twice (two live leases would show here).
		r := runs[id]
		if !slices.Contains(r, fmt.Sprintf("%d %s", task.Attempt, ex[len(ex)-1].ExecutionID)) {
			b.t.Errorf("task %s: the run log has no run of its succeeded execution (runs %q)", id, r)
		}
		seen := map[string]bool{}
		for _, run := range r {
			attempt := strings.Fields(run)[0]
			if seen[attempt] && !hasReleased(ex) {
				b.t.Errorf("task %s: attempt %s ran to the end twice (runs %q)", id, attempt, r)
			}
			seen[attempt] = true
		}
	}
	return got
}

func hasReleased(ex []backstop.Execution) bool {
	return slices.ContainsFunc(ex, func(e backstop.Execution) bool { return e.Outcome == bt.OutcomeReleased })
}

func outcomes(ex []backstop.Execution) string {
	var s []string
	for _, e := range ex {
		s = append(s, fmt.Sprintf("%d:%s", e.Attempt, e.Outcome))
	}
	return "[" + strings.Join(s, " ") + "]"
}

// TestCrashSIGKILL kills a worker in the middle of its tasks. After its
// leases expire, a second worker reruns them: every task succeeds, and the
// killed attempts are recorded as lease_expired, before the success.
func TestCrashSIGKILL(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, st.url(t), 50)
			// worker1 leads maintenance and dies: a short leader TTL lets
			// worker2 take over in time to settle the expired leases.
			// Kill while a task claimed less than half its run ago is
			// running: its program has half a second or more left, so no
			// settle of its own can be in flight. (The earlier rule, "two
			// tasks claimed after the last success", was not always met:
			// under load the four slots finish one by one, and each frees
			// one claim.) If a loaded machine let the chosen tasks finish
			// between the look and the kill, nothing was killed: start
			// worker1 again and retry (at most three times). If the worker
			// got through every task first, more tasks are enqueued.
			var (
				killed map[string]*backstop.Task
				seen   string
				tries  int
			)
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("the kill window: last seen %s; tries %d", seen, tries)
				}
			})
			for tries = 1; tries <= 3 && len(killed) == 0; tries++ {
				w1 := b.startWorker("worker1", "1", "--lease", "2s", "--leader-ttl", "2s")
				b.waitUntil("some tasks succeeded and a task claimed under half a second ago is running", func() bool {
					succeeded := b.list(bt.StateSucceeded)
					running := b.list(bt.StateRunning)
					now := time.Now()
					fresh := 0
					for _, x := range running {
						if x.AttemptedAt != nil && now.Sub(*x.AttemptedAt) < 500*time.Millisecond {
							fresh++
						}
					}
					seen = fmt.Sprintf("%d succeeded, %d running (%d claimed under 500ms ago)", len(succeeded), len(running), fresh)
					if len(running) == 0 && len(succeeded) == len(b.ids) {
						b.enqueue(context.Background(), 50)
					}
					return len(succeeded) > 0 && fresh > 0
				})
				if err := syscall.Kill(-w1.cmd.Process.Pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				w1.wait(t, "worker1")
				b.waitSettled(w1)
				killed = b.running()
			}
			if len(killed) == 0 {
				t.Fatal("no task was running when the worker was killed, three times")
			}
			t.Logf("%d tasks were running at the kill", len(killed))

			// The second worker's idle limit is longer than a lease plus the
			// leadership takeover, so it stays until the killed tasks rerun.
			w2 := b.startWorker("worker2", "0.05", "--lease", "2s", "--leader-ttl", "2s", "--exit-after-idle", "6s")
			if code := w2.wait(t, "worker2"); code != 0 {
				t.Fatalf("worker2 exited with %d, want 0", code)
			}
			b.checkKilled(killed)
		})
	}
}

// checkKilled checks every task's history, and that each attempt leased
// to the killed worker is recorded as lease_expired and was followed by
// another.
func (b *bundle) checkKilled(killed map[string]*backstop.Task) {
	t := b.t
	t.Helper()
	tasks := b.checkHistory()
	for id, k := range killed {
		ex := tasks[id].Executions
		i := slices.IndexFunc(ex, func(e backstop.Execution) bool { return e.ExecutionID == k.ExecutionID })
		if i < 0 {
			t.Errorf("task %s: the killed execution %s is not recorded (%s)", id, k.ExecutionID, outcomes(ex))
			continue
		}
		e := ex[i]
		if e.Outcome != bt.OutcomeLeaseExpired || e.WorkerID != k.WorkerID || e.Attempt != k.Attempt {
			t.Errorf("task %s: killed execution recorded as %s by %q attempt %d, want lease_expired by %q attempt %d",
				id, e.Outcome, e.WorkerID, e.Attempt, k.WorkerID, k.Attempt)
		}
		if !strings.Contains(e.Error, "lease expired") {
			t.Errorf("task %s: lease_expired execution's error %q does not say so", id, e.Error)
		}
		if i == len(ex)-1 {
			t.Errorf("task %s: nothing ran after the killed attempt (%s)", id, outcomes(ex))
		}
	}
}

// TestCrashSIGKILLClaimedAhead kills a worker of short tasks while it holds
// a task claimed ahead of its four slots (--prefetch 2: five or six tasks
// leased at once). After the leases expire a second worker reruns them:
// every task succeeds, and every attempt leased to the killed worker, run
// or only claimed ahead, is recorded as lease_expired.
func TestCrashSIGKILLClaimedAhead(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, st.url(t), 400)
			var killed map[string]*backstop.Task
			for tries := 1; tries <= 3 && len(killed) <= 4; tries++ {
				w1 := b.startWorker("worker1", "0.2", "--lease", "2s", "--leader-ttl", "2s", "--prefetch", "2")
				b.waitUntil("more tasks leased than the worker's four slots", func() bool {
					if len(b.list(bt.StateRunning)) > 4 {
						return true
					}
					if len(b.list(bt.StateSucceeded)) == len(b.ids) {
						b.enqueue(context.Background(), 400)
					}
					return false
				})
				if err := syscall.Kill(-w1.cmd.Process.Pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				w1.wait(t, "worker1")
				b.waitSettled(w1)
				killed = b.running()
			}
			if len(killed) <= 4 {
				t.Fatalf("%d tasks leased at the kill, three times; want more than the four slots", len(killed))
			}
			t.Logf("%d tasks were leased at the kill", len(killed))
			w2 := b.startWorker("worker2", "0.01", "--lease", "2s", "--leader-ttl", "2s", "--exit-after-idle", "6s")
			if code := w2.wait(t, "worker2"); code != 0 {
				t.Fatalf("worker2 exited with %d, want 0", code)
			}
			b.checkKilled(killed)
		})
	}
}

// TestDrainSIGTERM drains a worker whose tasks outlast the grace period: it
// exits, its programs are killed, their tasks are released without being
// charged, and a second worker finishes everything.
func TestDrainSIGTERM(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, st.url(t), 8)
			// Tasks take far longer than the test allows: only a drain
			// that kills and releases lets worker1 exit.
			w1 := b.startWorker("worker1", "600", "--lease", "10s", "--grace", "200ms")
			b.waitUntil("four tasks are running", func() bool { return len(b.list(bt.StateRunning)) == 4 })
			running := b.list(bt.StateRunning)
			if err := w1.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := w1.wait(t, "worker1 after SIGTERM"); code != 0 {
				t.Fatalf("worker1 exited with %d after SIGTERM, want 0", code)
			}
			b.programsGone()

			if left := b.list(bt.StateRunning); len(left) > 0 {
				t.Fatalf("%d tasks still running after the drain, want them released", len(left))
			}
			for _, r := range running {
				task := b.get(r.ID)
				ex := task.Executions
				if task.State != bt.StatePending || task.Attempt != 0 {
					t.Errorf("released task %s: state %s attempt %d, want pending with attempt 0 (not charged)", r.ID, task.State, task.Attempt)
				}
				if len(ex) != 1 || ex[0].Outcome != bt.OutcomeReleased || ex[0].ExecutionID != r.ExecutionID || ex[0].Attempt != 1 {
					t.Errorf("released task %s: executions %s, want one released attempt 1", r.ID, outcomes(ex))
				}
			}
			if n := len(b.list(bt.StatePending)); n != 8 {
				t.Errorf("%d tasks pending after the drain, want all 8", n)
			}
			if r := b.runs(); len(r) != 0 {
				t.Errorf("programs of released tasks ran to the end: %v", r)
			}

			w2 := b.startWorker("worker2", "0.05", "--exit-after-idle", "3s")
			if code := w2.wait(t, "worker2"); code != 0 {
				t.Fatalf("worker2 exited with %d, want 0", code)
			}
			tasks := b.checkHistory()
			for _, r := range running {
				ex := tasks[r.ID].Executions
				if len(ex) != 2 || ex[1].Attempt != 1 || tasks[r.ID].Attempt != 1 {
					t.Errorf("released task %s: executions %s attempt %d, want released then succeeded, both attempt 1",
						r.ID, outcomes(ex), tasks[r.ID].Attempt)
				}
			}
		})
	}
}

// TestDrainGraceFinishes drains a worker whose tasks finish within the
// grace period: they succeed, nothing is released, nothing new is claimed.
func TestDrainGraceFinishes(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, st.url(t), 8)
			w1 := b.startWorker("worker1", "2", "--lease", "10s", "--grace", "2m")
			b.waitUntil("four tasks are running", func() bool { return len(b.list(bt.StateRunning)) == 4 })
			running := b.list(bt.StateRunning)
			if err := w1.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := w1.wait(t, "worker1 after SIGTERM"); code != 0 {
				t.Fatalf("worker1 exited with %d after SIGTERM, want 0", code)
			}
			for _, r := range running {
				if task := b.get(r.ID); task.State != bt.StateSucceeded {
					t.Errorf("task %s, running at SIGTERM, is %s after the drain, want succeeded (%s)",
						r.ID, task.State, outcomes(task.Executions))
				}
			}
			for _, id := range b.ids {
				task := b.get(id)
				switch task.State {
				case bt.StateSucceeded:
					if len(task.Executions) != 1 || task.Executions[0].Outcome != bt.OutcomeSucceeded {
						t.Errorf("task %s: executions %s, want one succeeded", id, outcomes(task.Executions))
					}
				case bt.StatePending:
					if len(task.Executions) != 0 || task.Attempt != 0 {
						t.Errorf("pending task %s: executions %s attempt %d, want none", id, outcomes(task.Executions), task.Attempt)
					}
				default:
					t.Errorf("task %s is %s after a drain with enough grace, want succeeded or pending", id, task.State)
				}
			}

			w2 := b.startWorker("worker2", "0.05", "--exit-after-idle", "3s")
			if code := w2.wait(t, "worker2"); code != 0 {
				t.Fatalf("worker2 exited with %d, want 0", code)
			}
			b.checkHistory()
		})
	}
}
