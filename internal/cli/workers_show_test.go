package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestWorkersShowExecutions: workers show pages a worker's executions
// (--executions N, then --executions-after the cursor it names) and filters
// them (--outcome), the same on --db and over --server; bad values exit 2.
func TestWorkersShowExecutions(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		r := newRemoteEnv(t, e, "viewer")
		for _, kind := range []string{"ok", "bad", "ok", "bad", "ok"} {
			e.ok("enqueue", "--queue", "wsx", "--kind", kind, "--max-attempts", "1")
		}
		e.ok("work", "--queue", "wsx", "--id", "ex-worker", "--concurrency", "1", "--permanent-exit-codes", "3",
			"--exit-after-idle", "300ms", "--", "sh", "-c", `[ "$BACKSTOP_KIND" = bad ] && exit 3; exit 0`)

		type view struct {
			Executions []struct {
				ExecutionID string `json:"execution_id"`
				Outcome     string `json:"outcome"`
			} `json:"executions"`
			Next *string `json:"executions_next"`
		}
		show := func(args ...string) view {
			t.Helper()
			got := r.same(append([]string{"workers", "show", "ex-worker", "-o", "json"}, args...)...)
			var v view
			if err := json.Unmarshal([]byte(got.stdout), &v); err != nil {
				t.Fatalf("workers show %v: %v\n%s%s", args, err, got.stdout, got.stderr)
			}
			return v
		}
		all := show()
		if len(all.Executions) != 5 || all.Next != nil {
			t.Fatalf("workers show: %+v", all)
		}
		var paged []string
		args := []string{"--executions", "2"}
		for range 3 {
			v := show(args...)
			for _, x := range v.Executions {
				paged = append(paged, x.ExecutionID)
			}
			if v.Next == nil {
				break
			}
			args = []string{"--executions", "2", "--executions-after", *v.Next}
		}
		if len(paged) != 5 {
			t.Fatalf("paged %v, want the 5 executions", paged)
		}
		for i, x := range all.Executions {
			if paged[i] != x.ExecutionID {
				t.Fatalf("paged %v, want %+v", paged, all.Executions)
			}
		}
		bad := show("--outcome", "permanent_error")
		if len(bad.Executions) != 2 || bad.Executions[0].Outcome != "permanent_error" || bad.Executions[1].Outcome != "permanent_error" {
			t.Errorf("--outcome permanent_error: %+v", bad)
		}
		if table := r.same("workers", "show", "ex-worker", "--executions", "1"); !strings.Contains(table.stdout, "--executions-after ") {
			t.Errorf("workers show --executions 1 does not name the next page:\n%s", table.stdout)
		}
		for _, args := range [][]string{{"--executions", "0"}, {"--executions", "1001"}, {"--outcome", "bogus"},
			{"--executions-after", "garbage"}} {
			if got := r.same(append([]string{"workers", "show", "ex-worker"}, args...)...); got.code != ExitUsage {
				t.Errorf("workers show %v: exit %d, want %d: %s", args, got.code, ExitUsage, got.stderr)
			}
		}
	})
}
