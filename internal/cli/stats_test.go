package cli

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// TestStatsAndViews: `backstop stats` counts what was enqueued and measures
// the tables, as a table and as JSON; `tasks list --view` lists the
// operator views and refuses unknown ones and filters that do not apply.
func TestStatsAndViews(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		e.ok("enqueue", "--queue", "mail", "--kind", "k")
		e.ok("enqueue", "--queue", "mail", "--kind", "k")
		e.ok("enqueue", "--queue", "etl", "--kind", "k", "--delay", "1h")
		var st struct {
			Driver string `json:"driver"`
			Tasks  []struct {
				Queue, State string
				Count        int
			} `json:"tasks"`
			DeadLetters      []any  `json:"dead_letters"`
			OldestPendingAge string `json:"oldest_pending_age"`
			Tables           []struct {
				Table string `json:"table"`
				Bytes int64  `json:"bytes"`
			} `json:"tables"`
			DatabaseBytes int64 `json:"database_bytes"`
		}
		e.json(&st, "stats")
		counts := map[string]int{}
		for _, r := range st.Tasks {
			counts[r.Queue+"/"+r.State] = r.Count
		}
		if counts["mail/pending"] != 2 || counts["etl/scheduled"] != 1 || len(counts) != 2 {
			t.Fatalf("stats tasks %v", counts)
		}
		if st.DeadLetters == nil || st.OldestPendingAge == "" || st.DatabaseBytes <= 0 {
			t.Fatalf("stats: %+v", st)
		}
		tables := map[string]bool{}
		for _, x := range st.Tables {
			tables[x.Table] = true
		}
		if !tables["backstop_tasks"] || !tables["backstop_leaders"] {
			t.Fatalf("stats tables %v", st.Tables)
		}
		out := e.ok("stats")
		for _, want := range []string{"QUEUE", "mail", "pending", "DLQ_STATUS", "oldest pending", "database (" + st.Driver + ")"} {
			if !strings.Contains(out, want) {
				t.Fatalf("stats table lacks %q:\n%s", want, out)
			}
		}
		// A table measured is a row with its size; one that is not is no
		// row at all (one line says why), never a row of n/a.
		unmeasured := 0
		for _, x := range st.Tables {
			switch row := regexp.MustCompile(`(?m)^` + x.Table + `\s+\S`); {
			case x.Bytes >= 0 && !row.MatchString(out):
				t.Errorf("stats table lacks the row of %s (%d bytes):\n%s", x.Table, x.Bytes, out)
			case x.Bytes < 0 && row.MatchString(out):
				t.Errorf("stats table has a row for %s, which it could not measure:\n%s", x.Table, out)
			case x.Bytes < 0:
				unmeasured++
			}
		}
		if strings.Contains(out, "n/a") {
			t.Errorf("stats prints n/a:\n%s", out)
		}
		if unmeasured > 0 && !regexp.MustCompile(fmt.Sprintf(`\(%d tables\)\s+not measured one by one`, unmeasured)).MatchString(out) {
			t.Errorf("stats does not say why %d tables have no row:\n%s", unmeasured, out)
		}

		for _, v := range []string{"pending-retries", "retry-exhausted", "recent-failures"} {
			if ids := e.listIDs("--view", v); len(ids) != 0 {
				t.Fatalf("view %s on fresh tasks: %v", v, ids)
			}
			e.ok("tasks", "list", "--view", v)
		}
		e.fails(ExitUsage, "unknown view", "tasks", "list", "--view", "bogus")
		e.fails(ExitUsage, "--queue", "tasks", "list", "--view", "pending-retries", "--queue", "mail")
	})
}
