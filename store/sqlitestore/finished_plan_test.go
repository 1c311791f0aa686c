package sqlitestore

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop/store/internal/sqldialect"
)

// The reads the maintainer repeats every round (retention's pick, the
// activity rollup's finished work) and the console's last hour read the
// finished tasks and failed attempts of their span through the partial
// indexes that hold only those, never by a scan of the task table: their
// cost is the work in their span, not the history retention keeps.
func TestFinishedReadsUseTheirIndexes(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "plans.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	work := sqldialect.FinishedWorkSQL(activityExprs, 300, []int64{1000, 10000})
	for _, c := range []struct {
		name, sql, index string
		args             []any
	}{
		{"retention pick", sqlDoomedFinished, "backstop_tasks_finished", []any{"succeeded", 1, 1000}},
		{"rollup succeeded", work[0], "backstop_tasks_finished", []any{0, 1}},
		{"rollup failed attempts", work[1], "backstop_executions_failed", []any{0, 1}},
		{"rollup dead", work[2], "backstop_tasks_dead", []any{0, 1}},
		{"console minute succeeded", sqlMinuteSucceeded, "backstop_tasks_finished", []any{0, 1}},
	} {
		p := sqlitePlan(t, s, c.sql, c.args...)
		if !strings.Contains(p, "INDEX "+c.index+" ") || strings.Contains("\n"+p, "\nSCAN ") {
			t.Errorf("%s: not read through %s:\n%s", c.name, c.index, p)
		}
	}
}
