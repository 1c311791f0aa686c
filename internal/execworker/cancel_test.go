package execworker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/execworker"
	"github.com/backstophq/backstop/internal/testwait"
)

// TestCancelSendsSIGTERMThenSIGKILL: a task canceled while its program
// runs (cause backstop.ErrTaskCanceled) gets SIGTERM, then SIGKILL after
// the cancel grace. A program that exits 0 within the grace succeeded (its
// work is done); one that stops on the signal ends with an error carrying
// the cause; one that ignores it is killed whole once the grace is over.
func TestCancelSendsSIGTERMThenSIGKILL(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		script string
		check  func(t *testing.T, r execworker.Result, took time.Duration)
	}{
		{"finishes its work on SIGTERM", `trap 'sleep 0.2; echo done; exit 0' TERM; echo > "$STARTED"; sleep 300 & wait`,
			func(t *testing.T, r execworker.Result, took time.Duration) {
				if r.Err != nil || r.ExitCode != 0 || !strings.Contains(r.Output, "done") {
					t.Errorf("want a success after SIGTERM: %+v", r)
				}
			}},
		{"stops on SIGTERM", `echo > "$STARTED"; sleep 300`,
			func(t *testing.T, r execworker.Result, took time.Duration) {
				if r.Err == nil || !errors.Is(r.Err, backstop.ErrTaskCanceled) || !strings.Contains(r.Err.Error(), "SIGTERM") ||
					strings.Contains(r.Err.Error(), "SIGKILL") {
					t.Errorf("want a stop after SIGTERM carrying ErrTaskCanceled: %v", r.Err)
				}
				if took > 2*time.Second {
					t.Errorf("it stopped at once, yet Run took %s", took)
				}
			}},
		{"ignores SIGTERM", `trap '' TERM; echo > "$STARTED"; sleep 300`,
			func(t *testing.T, r execworker.Result, took time.Duration) {
				if r.Err == nil || !errors.Is(r.Err, backstop.ErrTaskCanceled) || !strings.Contains(r.Err.Error(), "SIGKILL") ||
					r.ExitCode != -1 {
					t.Errorf("want a SIGKILL after the grace: %+v", r)
				}
				if took < 400*time.Millisecond {
					t.Errorf("killed after %s, before its grace", took)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := filepath.Join(t.TempDir(), "started")
			h := newHandler(t, execworker.Config{Command: shell(tc.script),
				Env: append(os.Environ(), "STARTED="+out), CancelGrace: 500 * time.Millisecond})
			ctx, cancel := context.WithCancelCause(context.Background())
			done := make(chan execworker.Result, 1)
			go func() { done <- h.Run(ctx, testTask()) }()
			waitFile(t, out) // written once the trap is set
			at := time.Now()
			cancel(backstop.ErrTaskCanceled)
			r := <-done
			tc.check(t, r, time.Since(at))
		})
	}
}

// TestTimeoutKillsAtOnce: another end of the attempt (here a timeout)
// kills the group with no grace, even with a long cancel grace.
func TestTimeoutKillsAtOnce(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "started")
	h := newHandler(t, execworker.Config{Command: shell(`trap '' TERM; echo > "$STARTED"; sleep 300`),
		Env: append(os.Environ(), "STARTED="+out), CancelGrace: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	r := h.Run(ctx, testTask())
	if r.Err == nil || !strings.Contains(r.Err.Error(), "SIGKILL") || strings.Contains(r.Err.Error(), "SIGTERM") {
		t.Errorf("want an immediate SIGKILL: %v", r.Err)
	}
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	testwait.For(t, path+" to appear", func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
}
