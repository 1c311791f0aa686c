package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/testlog"
	"github.com/backstophq/backstop/internal/testwait"
)

// TestRemoteDrainReleases: a real `backstop work --server` process whose
// program outlives the drain's grace gives its task back uncharged
// (outcome released, attempt count unchanged) when SIGTERMed; the
// registry knows it as a remote worker with that execution.
func TestRemoteDrainReleases(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			db := st.url(t)
			srv := exec.Command(binary, "--db", db, "serve", "--dev", "--addr", "127.0.0.1:0")
			stdout, err := srv.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			serverLog := &testlog.Buffer{}
			srv.Stderr = serverLog
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			line, err := bufio.NewReader(stdout).ReadString('\n')
			go func() { exited <- srv.Wait() }()
			t.Cleanup(func() { _ = srv.Process.Kill(); <-exited })
			if err != nil {
				t.Fatalf("no address line: %v; log: %s", err, serverLog.String())
			}
			base := strings.Fields(strings.TrimPrefix(line, "backstop: serving "))[0]
			ctx := context.Background()
			cl := apiclient.New(base, "")
			res, err := cl.Enqueue(ctx, apiclient.Task{Queue: "drain", Kind: "k", MaxAttempts: 1})
			if err != nil {
				t.Fatal(err)
			}
			id := res.Task.ID

			began := filepath.Join(t.TempDir(), "began")
			work := exec.Command(binary, "--server", base, "work", "--queue", "drain", "--grace", "200ms", "--id", "drainer",
				"--", "sh", "-c", `touch "$0"; sleep 60`, began)
			workLog := &testlog.Buffer{}
			work.Stderr, work.Stdout = workLog, workLog
			if err := work.Start(); err != nil {
				t.Fatal(err)
			}
			workExited := make(chan error, 1)
			go func() { workExited <- work.Wait() }()
			t.Cleanup(func() { _ = work.Process.Kill(); <-workExited })

			// The program made its file: the worker holds the task (the
			// server's running state alone can come before the claim's
			// answer reaches the worker, and a remote worker's programs
			// write to the task's log, not to the worker's output).
			testwait.For(t, "the task to run", func() bool {
				v, err := cl.Get(ctx, id)
				return err == nil && v.State == bt.StateRunning && func() bool { _, err := os.Stat(began); return err == nil }()
			})
			if err := work.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-workExited:
				workExited <- err
				if err != nil {
					t.Fatalf("work exited with %v; log:\n%s", err, workLog.String())
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("work did not stop within 15s of SIGTERM; log:\n%s", workLog.String())
			}
			v, err := cl.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			ex := *v.Executions
			if v.State != bt.StatePending || v.Attempt != 0 || len(ex) != 1 || ex[0].Outcome != bt.OutcomeReleased {
				t.Fatalf("after the drain: state %s attempt %d executions %+v; log:\n%s", v.State, v.Attempt, ex, workLog.String())
			}
			w, err := cl.Worker(ctx, "drainer")
			if err != nil || !w.Remote || len(w.Executions) != 1 {
				t.Fatalf("registry: %+v %v", w, err)
			}
		})
	}
}
