package main

// Issue 13, item 1: a remote worker's report of a settled attempt is data.
// `backstop work --server` runs against a real `backstop serve` whose
// per-token rate limit is tiny and which is SIGKILLed and restarted in the
// middle, while producers sharing the worker's operator token hammer the
// API; with max_attempts 1, every task whose program exited 0 must end
// succeeded (a report lost to a 429 or to the restart would leave it
// lease_expired and dead). Reuses crash_test.go's TestMain binary.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/testlog"
	"github.com/backstophq/backstop/internal/testwait"
)

// reportScript prints a line (sent to the execution's log before the
// report), records that it ran, and exits 0.
const reportScript = `cat >/dev/null; echo "working on $BACKSTOP_TASK_ID"; sleep 0.1; echo "$BACKSTOP_TASK_ID" >> "$RUN_LOG"; exit 0`

// serveProc is one `backstop serve` process on a fixed address.
type serveProc struct {
	cmd    *exec.Cmd
	log    *testlog.Buffer
	exited chan error
}

func startServeAt(t *testing.T, db, addr string, args ...string) *serveProc {
	t.Helper()
	return startServeProc(t, addr, nil, append([]string{"--db", db, "serve", "--addr", addr, "--maintenance-interval", "100ms"}, args...)...)
}

// startServeProc starts the binary with args (a serve on addr) and waits
// for its "serving" line; it is SIGTERMed at the end of the test.
func startServeProc(t *testing.T, addr string, env []string, args ...string) *serveProc {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &serveProc{cmd: cmd, log: &testlog.Buffer{}, exited: make(chan error, 1)}
	cmd.Stderr = s.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	go func() { s.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-s.exited
		}
		if t.Failed() {
			t.Logf("serve %s log:\n%s", addr, s.log.String())
		}
	})
	if err != nil || !strings.Contains(line, "serving http://"+addr) {
		t.Fatalf("serve on %s: %q %v; log:\n%s", addr, line, err, s.log.String())
	}
	return s
}

func (s *serveProc) kill(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
		s.exited <- nil // for the cleanup
	case <-time.After(waitLong):
		t.Fatal("serve did not die on SIGKILL")
	}
}

// freeAddr is a loopback address nothing listens on (the restarted server
// must come back on the same one).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestRemoteReportsSurviveRateLimitAndRestart(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			const (
				tasks     = 120
				producers = 4
				q         = "reports"
			)
			db := st.url(t)
			c := remoteClient(t, db)
			ctx := context.Background()
			out, stderr, code := runCLI(t, db, "tokens", "create", "--name", "shared", "--role", "operator", "-o", "json")
			var tok struct{ Secret string }
			if code != 0 || json.Unmarshal([]byte(out), &tok) != nil {
				t.Fatalf("tokens create: exit %d: %s %s", code, out, stderr)
			}
			addr := freeAddr(t)
			base := "http://" + addr
			// 20 requests/s per token (burst 40); the producers alone ask
			// for about 40/s.
			limit := []string{"--rate-limit", "20"}
			srv := startServeAt(t, db, addr, limit...)

			// Producers: one operator token, shared with the worker. Each
			// enqueues its share (retrying what the limit refuses; the
			// idempotency key makes a retry after a lost answer harmless),
			// then keeps reading until told to stop, so the token's
			// bucket stays empty for the whole run.
			stop := make(chan struct{})
			var prod sync.WaitGroup
			for p := range producers {
				prod.Go(func() {
					cl := apiclient.New(base, tok.Secret)
					for i := p; i < tasks; i += producers {
						task := apiclient.Task{Queue: q, Kind: "job", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)),
							MaxAttempts: 1, IdempotencyKey: fmt.Sprintf("task-%d", i)}
						for {
							rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
							_, err := cl.Enqueue(rctx, task)
							cancel()
							if err == nil {
								break
							}
							select {
							case <-stop:
								return
							case <-time.After(100 * time.Millisecond):
							}
						}
					}
					for {
						select {
						case <-stop:
							return
						case <-time.After(100 * time.Millisecond):
						}
						rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
						_, _ = cl.Queues(rctx)
						cancel()
					}
				})
			}
			defer func() { close(stop); prod.Wait() }()

			runLog := filepath.Join(t.TempDir(), "runs.log")
			w := startReportWorker(t, base, tok.Secret, runLog, q)

			count := func(states ...bt.State) int {
				ts, err := c.List(ctx, backstop.ListParams{Queue: q, States: states, Limit: 5000})
				if err != nil {
					t.Fatal(err)
				}
				return len(ts)
			}
			terminal := []bt.State{bt.StateSucceeded, bt.StateDead, bt.StateCanceled}

			// Restart the server in the middle of the run: SIGKILL, then a
			// new process on the same address and database.
			testwait.For(t, "a third of the tasks are settled", func() bool { return count(terminal...) >= tasks/3 })
			refused := func() int {
				b, _ := os.ReadFile(w.stderr)
				return strings.Count(string(b), "connection refused")
			}
			before := refused()
			srv.kill(t)
			// Restart once the worker has met the dead server.
			testwait.For(t, "the worker meets the dead server", func() bool { return refused() > before })
			startServeAt(t, db, addr, limit...)

			testwait.For(t, "every task is enqueued and settled", func() bool { return count() == tasks && count(terminal...) == tasks })
			if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := w.wait(t, "remote worker"); code != 0 {
				t.Fatalf("remote worker exited %d", code)
			}

			ran := map[string]bool{}
			if b, err := os.ReadFile(runLog); err == nil {
				for _, id := range strings.Fields(string(b)) {
					ran[id] = true
				}
			}
			logged := map[string]bool{} // task ids the worker logged "task succeeded" for
			msgs := map[string]int{}
			if b, err := os.ReadFile(w.stderr); err == nil {
				for _, line := range strings.Split(string(b), "\n") {
					var rec struct {
						Msg    string `json:"msg"`
						TaskID string `json:"task_id"`
					}
					if json.Unmarshal([]byte(line), &rec) == nil {
						msgs[rec.Msg]++
						if rec.Msg == "task succeeded" {
							logged[rec.TaskID] = true
						}
					}
				}
			}
			t.Logf("worker log lines by message: %v", msgs)
			all, err := c.List(ctx, backstop.ListParams{Queue: q, Limit: 5000})
			if err != nil {
				t.Fatal(err)
			}
			bad, neverRan := 0, 0
			for _, lt := range all {
				task, err := c.Get(ctx, lt.ID)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case !ran[task.ID]:
					// Its claim's answer was lost to the SIGKILL: the
					// program never ran, which is not what this test is
					// about.
					neverRan++
					t.Logf("task %s never ran: %s after %s", task.ID, task.State, outcomes(task.Executions))
				case task.State != bt.StateSucceeded || len(task.Executions) != 1 || task.Executions[0].Outcome != bt.OutcomeSucceeded:
					bad++
					if bad <= 10 {
						t.Errorf("task %s: its program exited 0 but it is %s after %s", task.ID, task.State, outcomes(task.Executions))
					}
				}
				if logged[task.ID] != (task.State == bt.StateSucceeded) {
					t.Errorf("task %s is %s, but the worker logged \"task succeeded\": %v", task.ID, task.State, logged[task.ID])
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d tasks whose program exited 0 did not end succeeded", bad, tasks)
			}
			if neverRan > 4 { // at most the worker's concurrency of claims were in flight at the kill
				t.Errorf("%d tasks never ran", neverRan)
			}
		})
	}
}

func startReportWorker(t *testing.T, base, token, runLog, q string) *worker {
	t.Helper()
	cmd := exec.Command(binary, "work", "--server", base, "--queue", q, "--concurrency", "4", "--lease", "6s",
		"--grace", "30s", "--", "sh", "-c", reportScript)
	cmd.Env = append(os.Environ(), "BACKSTOP_TOKEN="+token, "RUN_LOG="+runLog)
	return startProc(t, cmd, filepath.Join(t.TempDir(), "worker.stderr"), "worker", 0)
}
