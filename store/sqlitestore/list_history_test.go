package sqlitestore_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/bench"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlitestore"
)

// A list page costs what its states hold, not the finished history: with
// 20,000 succeeded tasks whose ids sort before every other task, a state
// that holds no task is answered from the kept counts without a statement,
// and one that holds a few is read through its partial index (a search,
// never a scan of the table or of its primary key). The pages keep their
// order and cursor.
func TestListBehindHistory(t *testing.T) {
	s := open(t).(*sqlitestore.Store)
	ctx := t.Context()
	if _, err := bench.FillHistory(ctx, s, "q", 20_000, -1, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	var tasks []*bt.Task
	for i := range 6 {
		tasks = append(tasks, &bt.Task{ID: fmt.Sprintf("task-%02d", i), Queue: fmt.Sprintf("q%d", i%2), Kind: "k",
			State: bt.StatePending, MaxAttempts: 3, Payload: json.RawMessage(`{}`), RunAt: now, CreatedAt: now, UpdatedAt: now})
	}
	if _, err := s.Enqueue(ctx, tasks, store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Claim(ctx, store.ClaimParams{Queue: "q1", WorkerID: "w", Max: 1, Now: now, Lease: time.Minute}); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	if _, err := s.DB().ExecContext(ctx, "ANALYZE"); err != nil {
		t.Fatal(err)
	}
	ids := func(f store.ListFilter) []string {
		t.Helper()
		var got []string
		for {
			page, err := s.List(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, tk := range page {
				got = append(got, tk.ID)
			}
			if len(page) < f.Limit {
				return got
			}
			f.AfterID = page[len(page)-1].ID
		}
	}
	unfinished := []bt.State{bt.StateScheduled, bt.StatePending, bt.StateBuffered, bt.StateRunning, bt.StateDead, bt.StateCanceled}
	for _, c := range []struct {
		f    store.ListFilter
		want []string
		walk bool // many tasks in the states: walked by id
	}{
		{store.ListFilter{Queue: "q", States: unfinished}, nil, false},
		{store.ListFilter{Queue: "q", States: []bt.State{bt.StateDead}}, nil, false},
		{store.ListFilter{States: []bt.State{bt.StateCanceled, bt.StateScheduled}}, nil, false},
		{store.ListFilter{Queue: "q1", States: []bt.State{bt.StateRunning}}, []string{"task-01"}, false},
		{store.ListFilter{States: unfinished}, []string{"task-00", "task-01", "task-02", "task-03", "task-04", "task-05"}, false},
		{store.ListFilter{States: []bt.State{bt.StatePending, bt.StateRunning}, Newest: true}, []string{"task-05", "task-04", "task-03", "task-02", "task-01", "task-00"}, false},
		{store.ListFilter{Queue: "q1", States: []bt.State{bt.StateRunning, bt.StatePending, bt.StateDead}}, []string{"task-01", "task-03", "task-05"}, false},
		{store.ListFilter{Kind: "k", States: []bt.State{bt.StatePending, bt.StateSucceeded}, Newest: true}, []string{"task-05", "task-04", "task-03", "task-02", "task-00"}, true},
	} {
		for _, limit := range []int{2, 100} {
			f := c.f
			f.Limit = limit
			if got := ids(f); !slices.Equal(got, c.want) {
				t.Errorf("%+v: listed %v, want %v", f, got, c.want)
			}
		}
		plan, err := s.ExplainList(ctx, c.f)
		if err != nil {
			t.Fatal(err)
		}
		if c.want == nil && plan != "" {
			t.Errorf("%+v: a statement ran for states that hold no task:\n%s", c.f, plan)
		}
		for _, l := range strings.Split(plan, "\n") {
			// A scan reads a state's partial index whole, never the
			// table or its primary key.
			if !c.walk && strings.HasPrefix(l, "SCAN backstop_tasks") && !strings.Contains(l, "INDEX backstop_tasks_") {
				t.Errorf("%+v: the page scans the tasks:\n%s", c.f, plan)
			}
		}
	}
}
