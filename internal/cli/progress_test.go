package cli

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testwait"
)

// client opens a library client on the env's database (closed with the
// test).
func (e *cliEnv) client() *backstop.Client {
	e.t.Helper()
	ctx := context.Background()
	s, err := dburl.Open(ctx, e.db)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		e.t.Fatal(err)
	}
	c, err := backstop.NewClient(s, &backstop.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// TestWorkProgressFile: a program run by `backstop work` appends "N/M"
// lines to $BACKSTOP_PROGRESS_FILE; the task shows that progress while the
// program still runs (carried by the heartbeats) and keeps the last line's
// after it ends, on --db and over --server, on both stores. A line that is
// not N/M is skipped and noted in the execution's log.
func TestWorkProgressFile(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		r := newRemoteEnv(t, e, "operator")
		c := e.client()
		ctx := context.Background()
		for _, mode := range []string{"db", "server"} {
			id, queue := "progress-"+mode, "progress-"+mode
			e.ok("enqueue", "--queue", queue, "--kind", "k", "--id", id)
			release := filepath.Join(t.TempDir(), "release")
			// 2/5 is reported while the program waits for the test; the
			// last line, 3/5 with no newline, is read when it exits.
			prog := []string{"work", "--queue", queue, "--id", "w-" + mode, "--lease", "1500ms", "--exit-after-idle", "300ms", "--", "sh", "-c",
				`echo 1/5 >> "$BACKSTOP_PROGRESS_FILE"; echo nonsense >> "$BACKSTOP_PROGRESS_FILE"; echo 2/5 >> "$BACKSTOP_PROGRESS_FILE"
				while [ ! -e "` + release + `" ]; do sleep 0.05; done; printf 3/5 >> "$BACKSTOP_PROGRESS_FILE"`}
			done := make(chan cliResult, 1)
			go func() {
				if mode == "db" {
					done <- e.run("", prog...)
				} else {
					done <- r.remote("", prog...)
				}
			}()
			var task *backstop.Task
			testwait.For(t, mode+": the task running at 2/5", func() bool {
				var err error
				if task, err = c.Get(ctx, id); err != nil {
					t.Fatal(err)
				}
				return task.State == bt.StateRunning && task.Progress == (bt.Progress{Completed: 2, Total: 5})
			})
			// The registry names what the worker runs now.
			var w backstop.WorkerInfo
			e.json(&w, "workers", "show", "w-"+mode)
			if len(w.CurrentExecutionIDs) != 1 || w.CurrentExecutionIDs[0] != task.ExecutionID {
				t.Errorf("%s: worker runs %v, want [%s]", mode, w.CurrentExecutionIDs, task.ExecutionID)
			}
			if l := e.ok("workers", "list", "--queue", queue); !strings.Contains(l, "RUNNING") {
				t.Errorf("%s: workers list has no RUNNING column:\n%s", mode, l)
			}
			if err := os.WriteFile(release, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if got := <-done; got.code != 0 {
				t.Fatalf("%s: work: %+v", mode, got)
			}
			task, err := c.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if task.State != bt.StateSucceeded || task.Progress != (bt.Progress{Completed: 3, Total: 5}) {
				t.Errorf("%s: task %s with progress %+v, want succeeded at 3/5", mode, task.State, task.Progress)
			}
			if got := e.ok("tasks", "logs", id); !strings.Contains(got, `BACKSTOP_PROGRESS_FILE line "nonsense" is not N/M`) {
				t.Errorf("%s: execution log %q does not note the bad line", mode, got)
			}
		}
	})
}
