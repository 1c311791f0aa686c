package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/testlog"
	"github.com/backstophq/backstop/internal/testwait"
)

func runCLI(t *testing.T, db string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"--db", db}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// TestServe runs the real binary: refusals on public addresses, tokens,
// serving the API with a remote worker round trip, and a graceful SIGTERM
// that does not wait for a long-polling claim.
func TestServe(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			db := st.url(t)

			_, stderr, code := runCLI(t, db, "serve", "--addr", "0.0.0.0:0")
			if code != 2 || !strings.Contains(stderr, "not a loopback address and no API token exists") {
				t.Fatalf("serve on 0.0.0.0 without tokens: exit %d: %s", code, stderr)
			}
			_, stderr, code = runCLI(t, db, "serve", "--dev", "--addr", "0.0.0.0:0")
			if code != 2 || !strings.Contains(stderr, "loopback") {
				t.Fatalf("serve --dev on 0.0.0.0: exit %d: %s", code, stderr)
			}
			_, _, code = runCLI(t, db, "tokens", "create", "--name", "x", "--role", "root")
			if code != 2 {
				t.Fatalf("bad role: exit %d", code)
			}

			out, stderr, code := runCLI(t, db, "tokens", "create", "--name", "ops", "--role", "operator", "-o", "json")
			var created struct {
				ID, Name, Role, Secret string
			}
			if code != 0 || json.Unmarshal([]byte(out), &created) != nil || !strings.HasPrefix(created.Secret, "bst_") || created.Role != "operator" {
				t.Fatalf("tokens create: exit %d: %s %s", code, out, stderr)
			}
			if _, _, code := runCLI(t, db, "tokens", "create", "--name", "ops", "--role", "viewer"); code != 4 {
				t.Fatalf("a second live token named ops: exit %d, want 4 (conflict)", code)
			}

			srv := exec.Command(binary, "--db", db, "serve", "--addr", "127.0.0.1:0", "--maintenance-interval", "100ms")
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
			anon := apiclient.New(base, "")
			if err := anon.Do(ctx, "GET", "/healthz", nil, nil); err != nil {
				t.Fatal(err)
			}
			if err := anon.Do(ctx, "GET", "/readyz", nil, nil); err != nil {
				t.Fatal(err)
			}
			_, err = anon.Enqueue(ctx, apiclient.Task{Queue: "q", Kind: "k"})
			var p *api.Problem
			if !asProblem(err, &p) || p.Status != 401 {
				t.Fatalf("anonymous enqueue: %v", err)
			}
			op := apiclient.New(base, created.Secret)
			if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "q", Kind: "k"}); err != nil {
				t.Fatal(err)
			}
			ts, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"q"}, WorkerID: "remote", Max: 10})
			if err != nil || len(ts) != 1 {
				t.Fatalf("claim: %v %v", ts, err)
			}
			if r, err := op.Complete(ctx, ts[0].ID, api.CompleteRequest{LeaseToken: ts[0].LeaseToken}); err != nil || r.State != bt.StateSucceeded {
				t.Fatalf("complete: %+v %v", r, err)
			}
			if !strings.Contains(serverLog.String(), `"actor":"ops"`) {
				t.Errorf("the mutating calls' actor is not in the log:\n%s", serverLog.String())
			}

			// SIGTERM while a claim long-polls: the server ends promptly and cleanly.
			waiting := make(chan error, 1)
			go func() {
				_, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"empty"}, WorkerID: "long-poller", Wait: bt.Duration(25 * time.Second)})
				waiting <- err
			}()
			// The claim's worker in the registry: the server is handling it.
			testwait.For(t, "the server to see the long-polling claim", func() bool {
				_, err := op.Worker(ctx, "long-poller")
				return err == nil
			})
			// The claim waits 25s; the server must end it (and itself) well
			// before that.
			if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				exited <- err
				if err != nil {
					t.Fatalf("serve exited with %v; log:\n%s", err, serverLog.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("serve did not stop within 10s of SIGTERM")
			}
			if err := <-waiting; err != nil {
				t.Errorf("the waiting claim got %v, want an empty answer", err)
			}

			out, _, code = runCLI(t, db, "tokens", "list", "-o", "json")
			var list []struct {
				Name       string     `json:"name"`
				LastUsedAt *time.Time `json:"last_used_at"`
			}
			if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].LastUsedAt == nil {
				t.Fatalf("tokens list: exit %d: %s", code, out)
			}
			if _, _, code := runCLI(t, db, "tokens", "revoke", "ops"); code != 0 {
				t.Fatalf("revoke: exit %d", code)
			}
			if _, _, code := runCLI(t, db, "tokens", "revoke", created.ID); code != 4 {
				t.Fatalf("revoke twice: exit %d, want 4", code)
			}
		})
	}
}

func asProblem(err error, p **api.Problem) bool {
	pp, ok := err.(*api.Problem)
	*p = pp
	return ok
}
