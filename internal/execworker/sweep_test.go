package execworker_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/execworker"
	"github.com/backstophq/backstop/internal/testwait"
)

// TestSweepHelperWorker is the worker TestSweepResultDirs SIGKILLs: with
// BACKSTOP_SWEEP_HELPER set it runs a program that kills this process
// (SIGKILL, so no Close runs) while the task's result directory exists.
func TestSweepHelperWorker(t *testing.T) {
	if os.Getenv("BACKSTOP_SWEEP_HELPER") == "" {
		t.Skip("the helper process of TestSweepResultDirs")
	}
	h, err := execworker.New(execworker.Config{Command: shell(`kill -9 $PPID; sleep 5`)})
	if err != nil {
		t.Fatal(err)
	}
	h.Run(context.Background(), testTask())
	t.Fatal("still alive after SIGKILL")
}

// TestSweepResultDirs: a worker SIGKILLed while a task ran leaves its
// result directory (named with its pid); the next Handler's New removes
// it, and removes nothing else: not a live process's directory (its own
// or another's), not a directory without a pid in its name (an older
// worker's), not a file, not another program's directory.
func TestSweepResultDirs(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)

	// A real worker, SIGKILLed by its task's program.
	helper := exec.Command(os.Args[0], "-test.run", "^TestSweepHelperWorker$", "-test.count=1")
	helper.Env = append(os.Environ(), "BACKSTOP_SWEEP_HELPER=1", "TMPDIR="+tmp)
	err := helper.Run()
	if ws, ok := helper.ProcessState.Sys().(interface{ Signaled() bool }); !ok || !ws.Signaled() {
		t.Fatalf("the helper worker was not killed by a signal: %v", err)
	}
	dead := fmt.Sprintf("backstop-results-%d-", helper.Process.Pid)
	leaked := glob(t, tmp, dead+"*")
	if len(leaked) != 1 {
		t.Fatalf("the killed worker left %v, want one directory %s*", leaked, dead)
	}

	// A live process other than this one, with a directory in its name.
	live := exec.Command("sh", "-c", `mkdir "$TMPDIR/backstop-results-$$-7" && exec sleep 60`)
	live.Env = append(os.Environ(), "TMPDIR="+tmp)
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })
	liveDir := filepath.Join(tmp, fmt.Sprintf("backstop-results-%d-7", live.Process.Pid))
	testwait.For(t, "the live process's directory", func() bool { _, err := os.Stat(liveDir); return err == nil })

	// What is not a dead worker's directory.
	keep := []string{liveDir}
	for _, name := range []string{
		"backstop-results-123456789",                              // an older worker's: no pid
		"backstop-result-99",                                      // an older worker's per-task directory
		fmt.Sprintf("other-%d-1", helper.Process.Pid),             // another program's
		fmt.Sprintf("backstop-results-%d-x1", helper.Process.Pid), // not a random part
		fmt.Sprintf("backstop-results-0%d-1", helper.Process.Pid), // not a pid as written
	} {
		p := filepath.Join(tmp, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		keep = append(keep, p)
	}
	file := filepath.Join(tmp, fmt.Sprintf("backstop-results-%d-5", helper.Process.Pid))
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	keep = append(keep, file)

	// This process's own directory, made by a run.
	h := newHandler(t, execworker.Config{Command: shell(`true`)})
	t.Cleanup(func() { _ = h.Close() })
	if r := h.Run(context.Background(), testTask()); r.Err != nil {
		t.Fatal(r.Err)
	}
	own := glob(t, tmp, fmt.Sprintf("backstop-results-%d-*", os.Getpid()))
	if len(own) != 1 {
		t.Fatalf("this process's result directories: %v, want one", own)
	}
	keep = append(keep, own[0])
	if _, err := os.Lstat(leaked[0]); err == nil {
		t.Errorf("New left the killed worker's directory %s", leaked[0])
	}

	// Another sweep (as another worker starting) keeps all the rest.
	n, err := execworker.SweepResultDirs(tmp)
	if err != nil || n != 0 {
		t.Errorf("a second sweep removed %d (%v), want 0", n, err)
	}
	for _, p := range keep {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("swept what is not a dead worker's directory: %s", strings.TrimPrefix(p, tmp+"/"))
		}
	}
}

func glob(t *testing.T, dir, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil {
		t.Fatal(err)
	}
	return m
}
