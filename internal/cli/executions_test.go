package cli

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/store"
)

// TestTasksShowExecutionsWindow: tasks show prints the newest --executions
// executions, says how many there are and how to see the older ones, and
// pages through them with --executions-before; the same on the database
// and through a server; a bad --executions is exit 2.
func TestTasksShowExecutionsWindow(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		ctx := context.Background()
		s, err := dburl.Open(ctx, e.db)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		c, err := backstop.NewClient(s, &backstop.Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "ex", Kind: "k", MaxAttempts: 100})
		if err != nil {
			t.Fatal(err)
		}
		id := r.Task.ID
		for i := range 5 {
			now := time.Now()
			got, err := s.Claim(ctx, store.ClaimParams{Queue: "ex", WorkerID: "w", Max: 1, Now: now, Lease: time.Minute})
			if err != nil || len(got) != 1 {
				t.Fatalf("claim %d: %v %v", i, got, err)
			}
			if _, err := s.Settle(ctx, []store.Settlement{{TaskID: id, ExecutionID: got[0].ExecutionID,
				Outcome: backstop.OutcomeTransientError, Error: "boom", FinishedAt: now, State: backstop.StatePending, RunAt: now}}); err != nil {
				t.Fatal(err)
			}
		}
		rem := newRemoteEnv(t, e, "viewer")
		for _, run := range []func(args ...string) cliResult{
			func(args ...string) cliResult { return e.run("", args...) },
			func(args ...string) cliResult { return rem.remote("", args...) },
		} {
			out := run("tasks", "show", id)
			if out.code != 0 || !strings.Contains(out.stdout, "executions (5):") {
				t.Fatalf("tasks show: exit %d\n%s%s", out.code, out.stdout, out.stderr)
			}
			var v struct {
				Executions []struct {
					ExecutionID string `json:"execution_id"`
					Attempt     int    `json:"attempt"`
				} `json:"executions"`
				Total int    `json:"executions_total"`
				Next  string `json:"executions_next"`
			}
			var attempts []int
			args := []string{"tasks", "show", id, "--executions", "2"}
			for range 4 {
				out := run(append(args, "-o", "json")...)
				if out.code != 0 {
					t.Fatalf("%v: exit %d %s", args, out.code, out.stderr)
				}
				v.Next = ""
				if err := json.Unmarshal([]byte(out.stdout), &v); err != nil {
					t.Fatalf("%v -o json: %v\n%s", args, err, out.stdout)
				}
				if v.Total != 5 {
					t.Fatalf("executions_total %d, want 5", v.Total)
				}
				var a []int
				for _, x := range v.Executions {
					a = append(a, x.Attempt)
				}
				attempts = append(a, attempts...)
				if v.Next == "" {
					break
				}
				table := run(args...).stdout
				if want := "executions (the newest 2 of 5; older: --executions-before " + v.Next + "):"; !strings.Contains(table, want) {
					t.Fatalf("tasks show %v lacks %q:\n%s", args, want, table)
				}
				args = []string{"tasks", "show", id, "--executions", "2", "--executions-before", v.Next}
			}
			if len(attempts) != 5 || attempts[0] != 1 || attempts[4] != 5 {
				t.Fatalf("attempts over the windows: %v, want 1..5", attempts)
			}
			if out := run("tasks", "show", id, "--executions", "0"); out.code != ExitUsage || !strings.Contains(out.stderr, "--executions") {
				t.Errorf("--executions 0: exit %d %s", out.code, out.stderr)
			}
		}
	})
}
