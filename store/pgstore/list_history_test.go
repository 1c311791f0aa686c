package pgstore_test

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/bench"
	"github.com/backstophq/backstop/store"
)

// pageBuffers is the shared buffers (hit and read) of a plan's top node:
// what the statement touched.
func pageBuffers(t *testing.T, plan string) int {
	t.Helper()
	m := regexp.MustCompile(`Buffers: shared((?: \w+=\d+)*)`).FindStringSubmatch(plan)
	if m == nil {
		t.Fatalf("no buffers in plan:\n%s", plan)
	}
	n := 0
	for _, kv := range regexp.MustCompile(`(hit|read)=(\d+)`).FindAllStringSubmatch(m[1], -1) {
		v, _ := strconv.Atoi(kv[2])
		n += v
	}
	return n
}

// A list page costs what its states hold, not the finished history: with
// 20,000 succeeded tasks whose ids sort before every other task, a state
// that holds no task is answered from the kept counts without a statement,
// and one that holds a few is read through its partial index, touching a
// few pages where the walk by id touches the history's. The pages keep
// their order and cursor.
func TestListBehindHistory(t *testing.T) {
	b := setup(t)
	const history = 20_000
	if _, err := bench.FillHistory(t.Context(), b.store, "q", history, -1, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	var tasks []*bt.Task
	for i := range 6 {
		tk := newTask(fmt.Sprintf("q%d", i%2))
		tk.ID = fmt.Sprintf("task-%02d", i)
		tasks = append(tasks, tk)
	}
	enqueue(t, b.store, store.EnqueueOpts{}, tasks...)
	claim(t, b.store, "q1", 1, t0) // task-01 running
	if _, err := b.store.Pool().Exec(t.Context(), "VACUUM ANALYZE backstop_tasks"); err != nil {
		t.Fatal(err)
	}

	// Every state but succeeded, in the history's queue (the bench's own
	// check that a drain left nothing behind): the walk by id reads the
	// whole history, finding nothing.
	unfinished := store.ListFilter{Queue: "q", Limit: 5, States: []bt.State{bt.StateScheduled, bt.StatePending,
		bt.StateBuffered, bt.StateRunning, bt.StateDead, bt.StateCanceled}}
	walk, err := b.store.ExplainAnalyzeList(t.Context(), unfinished, true)
	if err != nil {
		t.Fatal(err)
	}
	if n := pageBuffers(t, walk); n < history/100 {
		t.Fatalf("the walk by id touched %d buffers only: the history does not show:\n%s", n, walk)
	}

	ids := func(f store.ListFilter) []string {
		t.Helper()
		var got []string
		for {
			page, err := b.store.List(t.Context(), f)
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
	for _, c := range []struct {
		f    store.ListFilter
		want []string
		walk bool // many tasks in the states: walked by id
	}{
		{unfinished, nil, false},
		{store.ListFilter{Queue: "q", States: []bt.State{bt.StateDead}}, nil, false},
		{store.ListFilter{States: []bt.State{bt.StateCanceled, bt.StateScheduled}}, nil, false},
		{store.ListFilter{Queue: "q", States: []bt.State{bt.StatePending}}, nil, false},
		{store.ListFilter{Queue: "q1", States: []bt.State{bt.StateRunning}}, []string{"task-01"}, false},
		{store.ListFilter{States: []bt.State{bt.StatePending}}, []string{"task-00", "task-02", "task-03", "task-04", "task-05"}, false},
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
		plan, err := b.store.ExplainAnalyzeList(t.Context(), c.f, false)
		if err != nil {
			t.Fatal(err)
		}
		if c.want == nil {
			if plan != "" {
				t.Errorf("%+v: a statement ran for states that hold no task:\n%s", c.f, plan)
			}
			continue
		}
		if n := pageBuffers(t, plan); n > 50 && !c.walk {
			t.Errorf("%+v: the page touched %d buffers:\n%s", c.f, n, plan)
		}
	}

	// The history's own state is listed by the walk: its first page comes
	// at once, in order.
	f := store.ListFilter{Queue: "q", States: []bt.State{bt.StateSucceeded}, Limit: 3}
	page, err := b.store.List(t.Context(), f)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 3 || page[0].ID >= page[1].ID || page[1].ID >= page[2].ID || page[2].State != bt.StateSucceeded {
		t.Fatalf("succeeded page: %v", page)
	}
	plan, err := b.store.ExplainAnalyzeList(t.Context(), f, false)
	if err != nil {
		t.Fatal(err)
	}
	if n := pageBuffers(t, plan); n > 50 {
		t.Errorf("succeeded page touched %d buffers:\n%s", n, plan)
	}
}
