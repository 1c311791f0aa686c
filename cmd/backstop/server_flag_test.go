package main

// --server is never silently ignored: every command of the real binary,
// found by walking the cobra tree (cli.CommandPaths), runs with --server
// (and, separately, BACKSTOP_SERVER) pointing at a live `backstop serve` on
// loopback, in an empty working directory with BACKSTOP_DB unset. None may
// create or touch a local file; each goes through the server (exit 0), or
// refuses with exit 2 naming --server, or needs neither (help, version,
// completion, config, bench ordering).

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/cli"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/workflow"
)

// srvKafka is a kfake broker's address for ingest's case.
var srvKafka string

type serverCase struct {
	mode string   // viaServer, refuses or local
	args []string // after the command's path
	want string   // viaServer: stdout contains this
	code int      // local: the exit code (a group without a subcommand exits 2)
}

const (
	viaServer = "server"
	refuses   = "refuses"
	local     = "local"
)

// serverCases says, for every command, what it must do with --server. A
// command missing here fails the test: decide, then add it. d is a dead
// letter and p a pending task owned by this run (replay, discard, resolve
// and cancel change them).
func serverCases(d []string, p, cfgFile, wfFile, run, rd string) map[string]serverCase {
	srv := func(want string, args ...string) serverCase {
		return serverCase{mode: viaServer, args: args, want: want}
	}
	ref := func(args ...string) serverCase { return serverCase{mode: refuses, args: args} }
	loc := func(code int, args ...string) serverCase { return serverCase{mode: local, args: args, code: code} }
	return map[string]serverCase{
		"activity":              srv("window 24h", "--window", "24h"),
		"audit":                 loc(2),
		"audit list":            srv("", "--since", "1h", "--limit", "5"),
		"bench":                 ref("-n", "10"),
		"bench floor":           ref("-n", "10"),
		"bench sustain":         ref("--duration", "1s"),
		"bench ordering":        loc(0, "--keys", "3", "--minutes", "2", "--workers", "1"),
		"completion":            loc(0),
		"completion bash":       loc(0),
		"completion fish":       loc(0),
		"completion powershell": loc(0),
		"completion zsh":        loc(0),
		"config":                loc(0),
		"config check":          loc(0, cfgFile),
		"config show":           loc(0),
		"demo":                  ref(),
		"dlq":                   loc(2),
		"dlq discard":           srv(d[0], d[0], "--reason", "test"),
		"dlq export":            srv("srv-", "--queue", "srv"),
		"dlq list":              srv("srv-", "--queue", "srv"),
		"dlq purge":             srv("", "--older-than", "30d"),
		"dlq redrive":           srv("", "--queue", "no-such-queue"),
		"dlq replay":            srv(d[1], d[1]),
		"dlq resolve":           srv(d[2], d[2], "--note", "test"),
		"dlq show":              srv(d[3], d[3]),
		"enqueue":               srv("", "--queue", "srv-enqueued", "--kind", "job"),
		"publish":               srv("", "--sink", "srv", "--topic", "t", "--payload", "{}"),
		"ingest":                srv("ingested 0", "--from", "kafka://"+srvKafka, "--topic", "srv-in", "--queue", "srv-in", "--kind", "k", "--exit-after-idle", "200ms"),
		"relay":                 ref("--sink", "bus=nats://127.0.0.1:1"),
		"relay status":          srv("CHECKPOINT"),
		"events":                loc(2),
		"events tail":           srv("task.enqueued", "--limit", "5"),
		"help":                  loc(0),
		"leases":                loc(0),
		"limits":                loc(2),
		"limits list":           srv("queue=srv-lim"),
		"limits remove":         srv("removed limit lim-"+p, "lim-"+p),
		"limits set":            srv("limit srv-set", "srv-set", "--queue", "srv-lim", "--concurrency", "2"),
		"leases rotate-key":     ref("--grace", "1m"),
		"migrate":               ref(),
		"migrate status":        ref(),
		"periodic":              loc(2),
		"periodic add":          srv("every 1m0s", "s-"+p, "--every", "1m", "--queue", "srv-q", "--kind", "k"),
		"periodic list":         srv("NEXT RUN"),
		"periodic pause":        srv("paused", "s-"+p),
		"periodic resume":       srv("resumed", "s-"+p),
		"periodic remove":       srv("removed", "rm-"+p),
		"queues":                loc(2),
		"queues list":           srv("srv-pending"),
		"queues pause":          srv("srv-paused", "srv-paused"),
		"queues resume":         srv("srv-paused", "srv-paused"),
		"queues fair":           srv("srv-fair", "srv-fair", "--by", "tenant"),
		"redrives":              loc(2),
		"redrives list":         srv(rd),
		"redrives show":         srv(rd, rd, "--failed"),
		"redrives cancel":       srv(rd, rd),
		"redrives resume":       srv("resumed", rd),
		"runs":                  loc(2),
		"runs show":             srv("run-1", "run-1"),
		"runs list":             srv("wfrun-", "--workflow", "srvflow"),
		"runs cancel":           srv(run, run),
		"runs resume":           srv("nothing matched", "run-1", "--yes"),
		"runs complete-step":    srv("run succeeded", strings.Replace(run, "wfrun-", "wfstep-", 1), "a", "--reason", "test"),
		"workflows":             loc(2),
		"workflows apply":       srv("srvflow", wfFile),
		"workflows list":        srv("srvflow"),
		"workflows show":        srv("srvflow", "srvflow"),
		"workflows run":         srv("", "srvflow", "--input", `{"n":1}`),
		"serve":                 ref("--dev", "--addr", "127.0.0.1:0"),
		"stats":                 ref(),
		"tasks":                 loc(2),
		"tasks cancel":          srv(p, p),
		"tasks delete":          srv("", "--queue", "srv-none", "--reason", "test", "--dry-run"),
		"tasks reprioritize":    srv("", "--queue", "srv-none", "--priority", "5", "--dry-run"),
		"tasks run-now":         srv("", "--queue", "srv-none", "--dry-run"),
		"tasks list":            srv(p, "--queue", "srv-pending"),
		"tasks logs":            srv("", d[3]),
		"tasks show":            srv(d[3], d[3]),
		"tokens":                loc(0),
		"tokens create":         ref("--name", "t", "--role", "viewer"),
		"tokens list":           ref(),
		"tokens revoke":         ref("t"),
		"version":               loc(0),
		"work":                  srv("", "--queue", "srv-work", "--exit-after-idle", "200ms", "--", "true"),
		"workers":               loc(2),
		"workers list":          srv("prep-worker"),
		"workers show":          srv("prep-worker", "prep-worker"),
	}
}

func TestEveryCommandHonoursServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.SQLite(t)
	c := deadLetters(t, db, "srv", 8)
	var pending []string
	for range 2 {
		r, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "srv-pending", Kind: "job",
			Attributes: map[string]string{"run_id": "run-1"}, Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, r.Task.ID)
		// A schedule per pass for periodic remove.
		if _, err := c.AddSchedule(ctx, backstop.ScheduleParams{Name: "rm-" + r.Task.ID, Every: time.Hour, Queue: "srv-q", Kind: "k"}); err != nil {
			t.Fatal(err)
		}
		// A limit per pass for limits remove.
		if _, err := c.SetLimit(ctx, backstop.Limit{Name: "lim-" + r.Task.ID, Queue: "srv-lim", Concurrency: 1}, ""); err != nil {
			t.Fatal(err)
		}
	}
	base := startServer(t, db)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "srv-in"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	srvKafka = kc.ListenAddrs()[0]
	cfgFile := filepath.Join(t.TempDir(), "backstop.yaml")
	if err := os.WriteFile(cfgFile, []byte("leader_ttl: 20s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A workflow, and a waiting run per pass for runs cancel.
	wfFile := filepath.Join(filepath.Dir(cfgFile), "srvflow.yaml")
	wfYAML := "name: srvflow\nqueue: srv-flow\nsteps:\n  - {id: a, kind: job}\n"
	if err := os.WriteFile(wfFile, []byte(wfYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	def, err := workflow.Parse([]byte(wfYAML))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.ApplyWorkflow(ctx, def); err != nil {
		t.Fatal(err)
	}
	var wfRuns []string
	for i := range 2 {
		r, err := c.RunWorkflow(ctx, backstop.RunWorkflowParams{Workflow: "srvflow", RunID: fmt.Sprintf("wfrun-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		wfRuns = append(wfRuns, r.RunID)
		// And one per pass for runs complete-step.
		if _, err := c.RunWorkflow(ctx, backstop.RunWorkflowParams{Workflow: "srvflow", RunID: fmt.Sprintf("wfstep-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}

	// A redrive per pass, paused at its limit, for redrives show, cancel
	// and resume.
	var redrives []string
	for i := range 2 {
		q := fmt.Sprintf("srv-rd%d", i)
		deadLetters(t, db, q, 3)
		pr, err := c.Redrive(ctx, backstop.RedriveParams{Filter: backstop.ListParams{Queue: q}, Limit: 1}, nil)
		if err != nil || pr.Done {
			t.Fatalf("redrive %s: %+v %v", q, pr, err)
		}
		redrives = append(redrives, pr.RedriveID)
	}

	env := []string{}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !slices.Contains([]string{"BACKSTOP_DB", "BACKSTOP_SERVER", "BACKSTOP_TOKEN", "HOME"}, k) {
			env = append(env, kv)
		}
	}
	run := func(viaEnv bool, args ...string) (dir, home, stdout, stderr string, code int) {
		t.Helper()
		dir, home = t.TempDir(), t.TempDir()
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		full := append([]string{"--server", base}, args...)
		e := append(slices.Clone(env), "HOME="+home)
		if viaEnv {
			full, e = args, append(e, "BACKSTOP_SERVER="+base)
		}
		cmd := exec.CommandContext(ctx, binary, full...)
		cmd.Dir, cmd.Env, cmd.Stdin = dir, e, strings.NewReader("")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return dir, home, out.String(), errb.String(), code
	}
	// A remote worker that workers list and show can find.
	if _, _, out, errs, code := run(false, "work", "--queue", "srv-work", "--id", "prep-worker", "--exit-after-idle", "200ms", "--", "true"); code != 0 {
		t.Fatalf("prep worker: exit %d\n%s%s", code, out, errs)
	}

	paths := cli.CommandPaths()
	for i, viaEnv := range []bool{false, true} {
		cases := serverCases([]string{
			"srv-0000" + string(rune('0'+4*i)), "srv-0000" + string(rune('1'+4*i)),
			"srv-0000" + string(rune('2'+4*i)), "srv-0000" + string(rune('3'+4*i)),
		}, pending[i], cfgFile, wfFile, wfRuns[i], redrives[i])
		for name := range cases {
			if !slices.Contains(paths, name) {
				t.Errorf("serverCases has %q, which is not a command any more", name)
			}
		}
		for _, path := range paths {
			tc, ok := cases[path]
			if !ok {
				t.Errorf("command %q is missing from serverCases: decide whether it goes through the server or refuses it", path)
				continue
			}
			args := append(strings.Fields(path), tc.args...)
			dir, home, out, errs, code := run(viaEnv, args...)
			how := "--server"
			if viaEnv {
				how = "BACKSTOP_SERVER"
			}
			for _, d := range []string{dir, home} {
				if ents, _ := os.ReadDir(d); len(ents) > 0 {
					t.Errorf("%s with %s created %s in %s", path, how, ents[0].Name(), d)
				}
			}
			switch tc.mode {
			case viaServer:
				if code != 0 || !strings.Contains(out, tc.want) {
					t.Errorf("%s with %s: exit %d, want 0 through the server with %q in stdout\nstdout: %s\nstderr: %s", path, how, code, tc.want, out, errs)
				}
			case refuses:
				if code != 2 || !strings.Contains(errs, "--server") {
					t.Errorf("%s with %s: exit %d, want 2 naming --server\nstdout: %s\nstderr: %s", path, how, code, out, errs)
				}
			case local:
				if code != tc.code {
					t.Errorf("%s with %s: exit %d, want %d\nstdout: %s\nstderr: %s", path, how, code, tc.code, out, errs)
				}
			}
		}
	}
	// The shell's TAB completion (cobra's hidden __complete) works too.
	if _, _, out, errs, code := run(true, "__complete", "tasks", ""); code != 0 || !strings.Contains(out, "list") {
		t.Errorf("__complete with BACKSTOP_SERVER: exit %d\n%s%s", code, out, errs)
	}
	// The changes went to the server's database.
	tk, err := c.Get(ctx, pending[0])
	if err != nil || tk.State != backstop.StateCanceled {
		t.Errorf("task %s canceled over the server: %v %v", pending[0], tk, err)
	}
}
