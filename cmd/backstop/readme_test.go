package main

// The newcomer's first hour, executed: every command README.md prints in
// its sh blocks, its Go program, the commands the demo and demo --serve
// print, and docs/api.md's curl example run for real (a SQLite file in a
// temporary directory, a live server on loopback, curl against it), and
// each exits as the documents promise. A program the README's work command
// runs (./send-email.sh) is a stand-in script.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testlog"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// repoRoot is the checkout (cmd/backstop's tests run in cmd/backstop).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// codeBlocks returns the fenced blocks of a Markdown file in language lang,
// each as its commands (continuation lines joined) or, for "go", one
// element holding the whole source.
func codeBlocks(t *testing.T, file, lang string) [][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), file))
	if err != nil {
		t.Fatal(err)
	}
	var blocks [][]string
	var cur []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case !in && line == "```"+lang:
			in, cur = true, nil
		case in && line == "```":
			in = false
			if lang == "go" {
				cur = []string{strings.Join(cur, "\n") + "\n"}
			}
			blocks = append(blocks, cur)
		case in && lang == "go":
			cur = append(cur, line)
		case in && strings.TrimSpace(line) != "":
			if n := len(cur); n > 0 && strings.HasSuffix(cur[n-1], "\\") {
				cur[n-1] = strings.TrimSuffix(cur[n-1], "\\") + strings.TrimSpace(line)
			} else {
				cur = append(cur, line)
			}
		}
	}
	if len(blocks) == 0 {
		t.Fatalf("%s has no %s block", file, lang)
	}
	return blocks
}

// shellEnv is the environment commands run in: PATH starts with bin, and
// no BACKSTOP_* variable of the machine leaks in.
func shellEnv(bin string, extra ...string) []string {
	env := []string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "BACKSTOP_"):
		case k == "PATH":
			env = append(env, "PATH="+bin+string(os.PathListSeparator)+v)
		default:
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// binDir is a directory whose backstop is the binary under test.
func binDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(binary, filepath.Join(dir, "backstop")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// sh runs one command line with bash, as typed, and returns its output.
func sh(t *testing.T, dir string, env []string, line string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", line)
	cmd.Dir, cmd.Env = dir, env
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	return out.String(), errb.String(), code
}

// background starts a long-running command line (exec'd by bash, so a
// signal reaches it) and returns it with its stdout and a wait that sends
// sig and returns the exit code.
func background(t *testing.T, dir string, env []string, line string) (*bufio.Reader, *testlog.Buffer, func(sig syscall.Signal) int) {
	t.Helper()
	cmd := exec.Command("bash", "-c", "exec "+line)
	cmd.Dir, cmd.Env = dir, env
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errb := &testlog.Buffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	stopped := false
	stop := func(sig syscall.Signal) int {
		stopped = true
		_ = cmd.Process.Signal(sig)
		killer := time.AfterFunc(time.Minute, func() {
			t.Errorf("%s did not stop within a minute of %v", line, sig)
			_ = cmd.Process.Kill()
		})
		defer killer.Stop()
		_, _ = io.Copy(io.Discard, r) // to EOF: the process closed stdout
		err := cmd.Wait()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		return 0
	}
	t.Cleanup(func() {
		if !stopped {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return r, errb, stop
}

// readUntil reads lines from r until one contains marker (or a deadline).
func readUntil(t *testing.T, r *bufio.Reader, marker string) []string {
	t.Helper()
	lines := make(chan string)
	go func() {
		defer close(lines)
		for {
			l, err := r.ReadString('\n')
			if l != "" {
				lines <- l
			}
			if err != nil || strings.Contains(l, marker) {
				return
			}
		}
	}()
	var got []string
	deadline := time.After(waitLong)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return got
			}
			got = append(got, strings.TrimRight(l, "\n"))
			if strings.Contains(l, marker) {
				return got
			}
		case <-deadline:
			t.Fatalf("no %q within %s; got %q", marker, waitLong, got)
		}
	}
}

func storeClient(t *testing.T, url string) (store.Store, *backstop.Client) {
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
	return s, c
}

// farm is a directory that looks like the checkout (a symlink per entry)
// so `go run ./cmd/backstop` works in it without writing into the checkout.
func farm(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	dir := t.TempDir()
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), ".db") {
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestREADMEFirstCommands: the README opens with the run command and the
// test command. The run command runs as typed (go run, from the checkout)
// and so does every command the demo then suggests.
func TestREADMEFirstCommands(t *testing.T) {
	t.Parallel()
	first := codeBlocks(t, "README.md", "sh")[0]
	var cmds []string
	for _, l := range first {
		c, _, _ := strings.Cut(l, "#")
		cmds = append(cmds, strings.TrimSpace(c))
	}
	if !slices.Equal(cmds, []string{"go run ./cmd/backstop demo", "./scripts/test"}) {
		t.Fatalf("README's first commands are %q", cmds)
	}
	// ./scripts/test is the suite this test is part of: it is not run from
	// inside it, but it must be there and executable.
	if fi, err := os.Stat(filepath.Join(repoRoot(t), "scripts", "test")); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("scripts/test: %v %v", fi, err)
	}

	dir := farm(t)
	env := shellEnv(t.TempDir())
	out, errs, code := sh(t, dir, env, first[0])
	if code != 0 || !strings.Contains(out, "look closer") {
		t.Fatalf("%s: exit %d\n%s\n%s", first[0], code, out, errs)
	}
	_, closer, _ := strings.Cut(out, "look closer\n")
	var suggested []string
	for _, l := range strings.Split(closer, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			suggested = append(suggested, l)
		}
	}
	if len(suggested) < 3 {
		t.Fatalf("the demo suggests %q", suggested)
	}
	for _, l := range suggested {
		if !strings.HasPrefix(l, "go run ./cmd/backstop ") {
			t.Errorf("under go run, the demo suggests %q, which a go run user cannot type", l)
			continue
		}
		if out, errs, code := sh(t, dir, env, l); code != 0 || out == "" {
			t.Errorf("%s: exit %d\n%s\n%s", l, code, out, errs)
		}
	}
}

// TestREADMEInstallAndVersion: go install from the checkout, then backstop
// version names the revision the build carries (none under this
// machine's -buildvcs=false or in a git worktree: it says so).
func TestREADMEInstallAndVersion(t *testing.T) {
	t.Parallel()
	var block []string
	for _, b := range codeBlocks(t, "README.md", "sh") {
		if strings.HasPrefix(b[0], "go install ./cmd/backstop") {
			block = b
		}
	}
	if len(block) != 2 || !strings.HasPrefix(block[1], "backstop version") {
		t.Fatalf("README's install block: %q", block)
	}
	gobin := t.TempDir()
	env := shellEnv(gobin, "GOBIN="+gobin)
	if out, errs, code := sh(t, repoRoot(t), env, block[0]); code != 0 {
		t.Fatalf("%s: exit %d\n%s%s", block[0], code, out, errs)
	}
	out, errs, code := sh(t, t.TempDir(), env, block[1])
	if code != 0 || !strings.HasPrefix(out, "backstop ") {
		t.Fatalf("%s: exit %d\n%s%s", block[1], code, out, errs)
	}
	flag, _, _ := sh(t, t.TempDir(), env, "backstop --version")
	if flag != out {
		t.Errorf("--version %q, version %q", flag, out)
	}
	meta, errs, code := sh(t, t.TempDir(), env, "go version -m "+filepath.Join(gobin, "backstop"))
	if code != 0 {
		t.Fatalf("go version -m: %s", errs)
	}
	if m := regexp.MustCompile(`vcs\.revision=([0-9a-f]+)`).FindStringSubmatch(meta); m != nil {
		if !strings.Contains(out, "revision "+m[1]) {
			t.Errorf("version %q lacks the build's revision %s", out, m[1])
		}
	} else if !strings.Contains(out, "revision unknown") {
		t.Errorf("version %q: the build has no VCS stamp, so it must say the revision is unknown", out)
	}
}

// seedREADME makes what the README's commands act on: a pending task to
// cancel, four dead letters (show, replay, discard, resolve) and one whose
// error contains "timeout" for the redrive.
func seedREADME(t *testing.T, s store.Store, c *backstop.Client) (pending string, dead []string) {
	t.Helper()
	ctx := context.Background()
	var params []backstop.EnqueueParams
	for i := range 5 {
		params = append(params, backstop.EnqueueParams{ID: fmt.Sprintf("dl-%d", i), Queue: "emails", Kind: "send_email",
			Payload: []byte(`{"to":"x@example.com","user":{"email":"old@example.com"}}`)})
	}
	if _, err := c.EnqueueMany(ctx, params); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	got, err := s.Claim(ctx, store.ClaimParams{Queue: "emails", WorkerID: "seed", Max: 5, Now: now, Lease: time.Minute})
	if err != nil || len(got) != 5 {
		t.Fatalf("claim: %d %v", len(got), err)
	}
	var ss []store.Settlement
	for _, task := range got {
		msg := "smtp: mailbox unavailable"
		if task.ID == "dl-4" {
			msg = "smtp: connection timeout"
		}
		ss = append(ss, store.Settlement{TaskID: task.ID, ExecutionID: task.ExecutionID, Outcome: bt.OutcomeTransientError,
			Error: msg, FinishedAt: now, State: bt.StateDead, DeadReason: bt.ReasonAttemptsExhausted})
	}
	if _, err := s.Settle(ctx, ss); err != nil {
		t.Fatal(err)
	}
	r, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "emails", Kind: "send_email", Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return r.Task.ID, []string{"dl-0", "dl-1", "dl-2", "dl-3"}
}

// TestREADMEBinaryCommands runs "The binary" block line by line, as typed,
// on the default database (./backstop.db) of an empty directory; the bench
// lines last, at once, each in an empty directory of its own.
func TestREADMEBinaryCommands(t *testing.T) {
	t.Parallel()
	var block []string
	for _, b := range codeBlocks(t, "README.md", "sh") {
		if strings.HasPrefix(b[0], "backstop enqueue") {
			block = b
		}
	}
	if len(block) < 10 {
		t.Fatalf("README's binary block: %q", block)
	}
	dir := t.TempDir()
	env := shellEnv(binDir(t))
	if err := os.WriteFile(filepath.Join(dir, "send-email.sh"), []byte("#!/bin/sh\ncat >/dev/null\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s, c := storeClient(t, "sqlite://"+filepath.Join(dir, "backstop.db"))
	pending, dead := seedREADME(t, s, c)
	ids := map[string]string{"tasks cancel": pending, "dlq show": dead[0], "dlq replay": dead[1], "dlq discard": dead[2], "dlq resolve": dead[3]}
	var enqueued string
	var benches []string
	ctx := context.Background()

	for _, line := range block {
		words := strings.Fields(line)
		verb := strings.Join(words[1:min(3, len(words))], " ")
		if words[1] == "bench" {
			benches = append(benches, line)
			continue
		}
		if strings.Contains(line, "<id>") {
			id := ids[verb]
			if verb == "tasks show" || verb == "events tail" {
				id = enqueued
			}
			if id == "" {
				t.Fatalf("no id for %q", line)
			}
			line = strings.ReplaceAll(line, "<id>", id)
		}
		switch {
		case verb == "work --queue":
			// Runs until SIGTERM, then drains and exits 0.
			_, errb, stop := background(t, dir, env, line)
			testwait.For(t, "the enqueued task to succeed", func() bool {
				tk, err := c.Get(ctx, enqueued)
				return err == nil && tk.State == backstop.StateSucceeded
			})
			if code := stop(syscall.SIGTERM); code != 0 {
				t.Errorf("%s: exit %d after SIGTERM\n%s", line, code, errb.String())
			}
		case strings.Contains(line, "--follow"):
			// Prints the stream until interrupted.
			r, errb, stop := background(t, dir, env, line)
			readUntil(t, r, "task.succeeded")
			if code := stop(syscall.SIGINT); code != 0 {
				t.Errorf("%s: exit %d after SIGINT\n%s", line, code, errb.String())
			}
		default:
			out, errs, code := sh(t, dir, env, line)
			if code != 0 {
				t.Errorf("%s: exit %d\nstdout: %s\nstderr: %s", line, code, out, errs)
			}
			if strings.HasPrefix(line, "backstop enqueue --queue emails") {
				enqueued = strings.TrimSpace(out)
			}
		}
	}
	// What the commands did is in the database.
	for id, want := range map[string]bt.State{pending: bt.StateCanceled, dead[1]: bt.StatePending, "dl-4": bt.StatePending} {
		if tk, err := c.Get(ctx, id); err != nil || tk.State != want {
			t.Errorf("%s: %v %v, want %s", id, tk, err, want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "archive.ndjson")); err != nil || strings.Count(string(b), "\n") != 2 {
		t.Errorf("archive.ndjson: %v, %d lines, want the discarded and the resolved record", err, strings.Count(string(b), "\n"))
	}
	// The bench lines neither need nor change what the lines above did,
	// and each takes minutes: each runs as typed on the default database
	// of an empty directory of its own, alongside the others.
	if len(benches) == 0 {
		t.Fatal("README's binary block has no bench line")
	}
	for _, line := range benches {
		name, _, _ := strings.Cut(line, "#")
		t.Run(strings.TrimSpace(name), func(t *testing.T) {
			t.Parallel()
			if out, errs, code := sh(t, t.TempDir(), env, line); code != 0 {
				t.Errorf("%s: exit %d\nstdout: %s\nstderr: %s", line, code, out, errs)
			}
		})
	}
}

// TestREADMELibraryProgram builds the README's Go program as it stands
// and runs it: its three tasks succeed, and Ctrl-C drains it (exit 0).
func TestREADMELibraryProgram(t *testing.T) {
	t.Parallel()
	blocks := codeBlocks(t, "README.md", "go")
	if len(blocks) != 1 {
		t.Fatalf("README has %d Go blocks, want the one program", len(blocks))
	}
	tmp := t.TempDir()
	src := filepath.Join(tmp, "main.go")
	if err := os.WriteFile(src, []byte(blocks[0][0]), 0o644); err != nil {
		t.Fatal(err)
	}
	// The overlay puts the file inside the module without writing there.
	overlay := filepath.Join(tmp, "overlay.json")
	virtual := filepath.Join(repoRoot(t), "cmd", "readme-example", "main.go")
	if err := os.WriteFile(overlay, []byte(fmt.Sprintf(`{"Replace":{%q:%q}}`, virtual, src)), 0o644); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(tmp, "readme-example")
	build := exec.Command("go", "build", "-overlay", overlay, "-o", prog, "./cmd/readme-example")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the README's Go program does not build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	cmd := exec.Command(prog)
	cmd.Dir = dir
	log := &testlog.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var exitErr error
	done := make(chan struct{})
	go func() { exitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	// The program migrates its database: open it only once it works.
	testwait.For(t, "the README program to send its three emails", func() bool {
		select {
		case <-done:
			t.Fatalf("the README program exited early: %v\n%s", exitErr, log.String())
		default:
		}
		l := log.String()
		return strings.Contains(l, "sending to a@example.com") && strings.Contains(l, "sending to b@example.com") &&
			strings.Contains(l, "sending to c@example.com")
	})
	_, c := storeClient(t, "sqlite://"+filepath.Join(dir, "backstop.db"))
	testwait.For(t, "the README program's three tasks to succeed", func() bool {
		ts, err := c.List(context.Background(), backstop.ListParams{Queue: "emails", States: []bt.State{bt.StateSucceeded}, Limit: 10})
		return err == nil && len(ts) == 3
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		if exitErr != nil {
			t.Fatalf("the README program after Ctrl-C: %v\n%s", exitErr, log.String())
		}
	case <-time.After(waitLong):
		t.Fatal("the README program did not stop after Ctrl-C")
	}
}

// TestDemoServePrintedCommands runs every command demo --serve prints
// (curl against it, the backstop commands on its database).
func TestDemoServePrintedCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := shellEnv(binDir(t))
	r, errb, stop := background(t, dir, env, "backstop demo --serve --addr 127.0.0.1:0")
	printed := readUntil(t, r, "Ctrl-C stops.")
	var cmds []string
	for _, l := range printed {
		if strings.HasPrefix(l, "  curl ") || strings.HasPrefix(l, "  backstop ") {
			cmds = append(cmds, strings.TrimSpace(l))
		}
	}
	if len(cmds) < 5 || !slices.ContainsFunc(cmds, func(c string) bool { return strings.HasSuffix(c, "/metrics") }) {
		t.Fatalf("demo --serve printed %q", cmds)
	}
	_, c := storeClient(t, "sqlite://"+filepath.Join(dir, "backstop-demo.db"))
	testwait.For(t, "a dead letter", func() bool {
		ts, err := c.DeadLetters(context.Background(), backstop.ListParams{Limit: 1})
		return err == nil && len(ts) > 0
	})
	for _, l := range cmds {
		out, errs, code := sh(t, dir, env, l)
		if code != 0 || out == "" || strings.Contains(out, "urn:backstop:problem") {
			t.Errorf("%s: exit %d\nstdout: %.500s\nstderr: %s", l, code, out, errs)
		}
		if strings.Contains(l, "--state dead") && !strings.Contains(out, "dead") {
			t.Errorf("%s lists no dead task:\n%s", l, out)
		}
	}
	if code := stop(syscall.SIGTERM); code != 0 {
		t.Errorf("demo --serve: exit %d after SIGTERM\n%s", code, errb.String())
	}
}

// TestAPIDocExample runs docs/api.md's example: a token, a server, and
// the curl that enqueues (on a free port instead of 8080).
func TestAPIDocExample(t *testing.T) {
	t.Parallel()
	block := codeBlocks(t, "docs/api.md", "sh")[0]
	if len(block) != 3 {
		t.Fatalf("docs/api.md's example: %q", block)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for i := range block {
		block[i] = strings.ReplaceAll(block[i], "127.0.0.1:8080", addr)
	}
	dir := t.TempDir()
	env := shellEnv(binDir(t))
	out, errs, code := sh(t, dir, env, block[0]+"\n"+`printf %s "$TOKEN"`)
	if code != 0 || !strings.HasPrefix(out, "bst_") {
		t.Fatalf("%s: exit %d %q %s", block[0], code, out, errs)
	}
	env = append(env, "TOKEN="+out)
	r, errb, stop := background(t, dir, env, block[1])
	readUntil(t, r, "serving")
	out, errs, code = sh(t, dir, env, block[2])
	if code != 0 || !strings.Contains(out, `"task":{"id":`) {
		t.Errorf("%s: exit %d\nstdout: %s\nstderr: %s", block[2], code, out, errs)
	}
	if code := stop(syscall.SIGTERM); code != 0 {
		t.Errorf("serve: exit %d after SIGTERM\n%s", code, errb.String())
	}
}

// TestREADMEWorkflowCommands runs the README's workflow block as written
// (from a directory holding docs/examples/order.yaml): the definition
// registers, the run starts and prints its id, a batch file of two runs
// starts both (one id a line), runs show and runs list
// find it.
func TestREADMEWorkflowCommands(t *testing.T) {
	t.Parallel()
	var block []string
	for _, b := range codeBlocks(t, "README.md", "sh") {
		if strings.HasPrefix(b[0], "backstop workflows apply") {
			block = b
		}
	}
	if len(block) < 4 {
		t.Fatalf("README's workflow block: %q", block)
	}
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "examples", "order.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "docs", "examples"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "docs", "examples", "order.yaml"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(shellEnv(binDir(t)), "BACKSTOP_DB=sqlite://"+filepath.Join(dir, "backstop.db"))
	if _, errs, code := sh(t, dir, env, "backstop migrate"); code != 0 {
		t.Fatalf("migrate: %s", errs)
	}
	// The batch line's file: two runs of order.
	batch := `{"workflow":"order","input":{"card":"4242","emails":["a@example.com"]}}` + "\n" +
		`{"workflow":"order","input":{"card":"4242","emails":["b@example.com"]}}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "runs.ndjson"), []byte(batch), 0o644); err != nil {
		t.Fatal(err)
	}
	runID, batched := "", false
	for _, line := range block {
		line = strings.ReplaceAll(line, "<run_id>", runID)
		out, errs, code := sh(t, dir, env, line)
		if code != 0 {
			t.Errorf("%s: exit %d\nstdout: %s\nstderr: %s", line, code, out, errs)
		}
		switch {
		case strings.HasPrefix(line, "backstop workflows run") && strings.Contains(line, "--batch-file"):
			batched = true
			if ids := strings.Fields(out); len(ids) != 2 {
				t.Errorf("%s printed %q, want the 2 run ids of runs.ndjson", line, out)
			}
		case strings.HasPrefix(line, "backstop workflows run"):
			runID = strings.TrimSpace(out)
		}
		if strings.HasPrefix(line, "backstop runs show") && !strings.Contains(out, "reserve") {
			t.Errorf("%s printed no step: %s", line, out)
		}
	}
	if runID == "" {
		t.Fatal("workflows run printed no run id")
	}
	if !batched {
		t.Error("README's workflow block has no workflows run --batch-file line")
	}
}
