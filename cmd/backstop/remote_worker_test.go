package main

// `backstop work --server`: the exec worker over the HTTP worker protocol,
// against a real `backstop serve` process on loopback over SQLite. Reuses
// crash_test.go's TestMain binary and helpers.

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testlog"
	"github.com/backstophq/backstop/internal/testwait"
)

// remoteScript: "ok" succeeds, "perm" exits 65 (listed permanent), "flaky"
// exits 3 (transient), "slow" sleeps on its first attempt.
const remoteScript = `cat >/dev/null; case "$BACKSTOP_KIND" in ok) exit 0;; perm) exit 65;; flaky) exit 3;; ` +
	`slow) if [ "$BACKSTOP_ATTEMPT" = 1 ]; then echo started > "$MARK"; sleep 4; fi; exit 0;; esac; exit 1`

func startServer(t *testing.T, db string) string {
	t.Helper()
	srv := exec.Command(binary, "--db", db, "serve", "--dev", "--addr", "127.0.0.1:0", "--maintenance-interval", "100ms")
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	log := &testlog.Buffer{}
	srv.Stderr = log
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	go func() { exited <- srv.Wait() }()
	t.Cleanup(func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = srv.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("server log:\n%s", log.String())
		}
	})
	if err != nil {
		t.Fatalf("no address line: %v; log: %s", err, log.String())
	}
	return strings.Fields(strings.TrimPrefix(line, "backstop: serving "))[0]
}

func startRemoteWorker(t *testing.T, base, name string, env []string, args ...string) *worker {
	t.Helper()
	full := append([]string{"work", "--server", base, "--queue", "remote", "--permanent-exit-codes", "65"}, args...)
	full = append(full, "--", "sh", "-c", remoteScript)
	cmd := exec.Command(binary, full...)
	cmd.Env = append(os.Environ(), env...)
	return startProc(t, cmd, filepath.Join(t.TempDir(), name+".stderr"), name, 0)
}

func remoteClient(t *testing.T, db string) *backstop.Client {
	t.Helper()
	_, c := storeClient(t, db)
	return c
}

func TestRemoteWorker(t *testing.T) {
	t.Parallel()
	db := testdb.SQLite(t)
	c := remoteClient(t, db)
	ctx := context.Background()
	retry := &backstop.RetryPolicy{Schedule: []backstop.Duration{0}}
	var params []backstop.EnqueueParams
	for _, kind := range []string{"ok", "ok", "ok", "perm", "flaky"} {
		params = append(params, backstop.EnqueueParams{Queue: "remote", Kind: kind, Payload: []byte(`{}`), MaxAttempts: 2, Retry: retry})
	}
	res, err := c.EnqueueMany(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	base := startServer(t, db)
	w := startRemoteWorker(t, base, "remote", []string{"BACKSTOP_TOKEN="}, "--concurrency", "3", "--exit-after-idle", "2s")
	if code := w.wait(t, "remote worker"); code != 0 {
		t.Fatalf("remote worker exited %d", code)
	}
	for i, r := range res {
		task, err := c.Get(ctx, r.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		var want bt.State
		var attempts int
		switch params[i].Kind {
		case "ok":
			want, attempts = bt.StateSucceeded, 1
		case "perm":
			want, attempts = bt.StateDead, 1
		case "flaky":
			want, attempts = bt.StateDead, 2
		}
		if task.State != want || len(task.Executions) != attempts {
			t.Errorf("%s task %s: %s after %d executions (%s), want %s after %d", params[i].Kind, task.ID, task.State,
				len(task.Executions), outcomes(task.Executions), want, attempts)
		}
		if params[i].Kind == "perm" && task.Executions[0].Outcome != bt.OutcomePermanentError {
			t.Errorf("perm task: outcome %s", task.Executions[0].Outcome)
		}
		if params[i].Kind == "flaky" && task.Executions[0].Outcome != bt.OutcomeTransientError {
			t.Errorf("flaky task: outcome %s", task.Executions[0].Outcome)
		}
	}
}

// TestRemoteWorkerSIGKILL kills a remote worker mid-task: the server's
// maintenance expires the lease and another remote worker runs it again.
func TestRemoteWorkerSIGKILL(t *testing.T) {
	t.Parallel()
	db := testdb.SQLite(t)
	c := remoteClient(t, db)
	ctx := context.Background()
	r, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "remote", Kind: "slow", Payload: []byte(`{}`),
		Retry: &backstop.RetryPolicy{Schedule: []backstop.Duration{0}}})
	if err != nil {
		t.Fatal(err)
	}
	base := startServer(t, db)
	mark := filepath.Join(t.TempDir(), "mark")
	w1 := startRemoteWorker(t, base, "remote1", []string{"MARK=" + mark}, "--lease", "1s")
	testwait.For(t, "the task to start", func() bool { _, err := os.Stat(mark); return err == nil })
	if err := syscall.Kill(-w1.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	w1.wait(t, "remote1")
	w2 := startRemoteWorker(t, base, "remote2", []string{"MARK=" + mark}, "--lease", "1s", "--exit-after-idle", "4s")
	if code := w2.wait(t, "remote2"); code != 0 {
		t.Fatalf("remote2 exited %d", code)
	}
	task, err := c.Get(ctx, r.Task.ID)
	if err != nil {
		t.Fatal(err)
	}
	ex := task.Executions
	if task.State != bt.StateSucceeded || len(ex) != 2 || ex[0].Outcome != bt.OutcomeLeaseExpired || ex[1].Outcome != bt.OutcomeSucceeded {
		t.Fatalf("task %s: %s after %s, want lease_expired then succeeded", task.ID, task.State, outcomes(ex))
	}
}

// TestDemoServe starts the live tour briefly: /healthz, /metrics and /v1/tasks answer,
// and SIGTERM stops it cleanly.
func TestDemoServe(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "demo.db")
	cmd := exec.Command(binary, "--db", db, "demo", "--serve", "--addr", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errb := &testlog.Buffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	if err != nil || !strings.Contains(line, "serving http://") {
		t.Fatalf("no serving line: %q %v; stderr %s", line, err, errb.String())
	}
	// The first line opens with the console's URL: "backstop demo: console http://HOST:PORT/ …".
	base := strings.TrimSuffix(strings.Fields(strings.TrimPrefix(line, "backstop demo: console "))[0], "/")
	for _, p := range []string{"/", "/healthz", "/v1/openapi.json", "/metrics"} {
		resp, err := http.Get(base + p)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %v %v", p, resp, err)
		}
		resp.Body.Close()
	}
	testwait.For(t, "the producers to enqueue", func() bool {
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		resp, err := http.Get(base + "/v1/tasks?limit=5")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET /v1/tasks: %v %v", resp, err)
		}
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		return len(list.Items) > 0
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("demo --serve exited with %v; stderr %s", err, errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("demo --serve did not stop within 20s of SIGTERM")
	}
}
