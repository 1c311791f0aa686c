package pgstore_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/internal/sqldialect"
)

// exactCounts is the count by queue the store made before it read its
// indexes: one grouped scan of every task (sqldialect.SQLCountByQueue).
func exactCounts(t *testing.T, b *testBundle) []store.QueueCounts {
	t.Helper()
	rows, err := b.store.Pool().Query(t.Context(), sqldialect.SQLCountByQueue)
	if err != nil {
		t.Fatal(err)
	}
	qs, err := sqldialect.ScanQueueCounts("exact", rows)
	if err != nil {
		t.Fatal(err)
	}
	return qs
}

// Past the cap, the succeeded and canceled counts are those of the newest
// finished tasks, lower bounds flagged Capped on every queue; up to it they
// are exact, and every other state is exact either way.
func TestCountByQueueCapped(t *testing.T) {
	b := setup(t)
	var tasks []*bt.Task
	for i := range 9 {
		tk := newTask([]string{"x", "y", "z"}[i%3])
		tk.ID = fmt.Sprintf("cap-%d", i)
		tasks = append(tasks, tk)
	}
	enqueue(t, b.store, store.EnqueueOpts{}, tasks...)
	// x and y each: two succeed (y's later), one stays running; z's tasks
	// stay pending.
	for k, q := range []string{"x", "y"} {
		got := claim(t, b.store, q, 3, t0)
		for i, tk := range got[:2] {
			settle(t, b.store, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomeSucceeded,
				FinishedAt: t0.Add(time.Duration(2*k+i) * time.Second), State: bt.StateSucceeded})
		}
	}
	exact := exactCounts(t, b)
	for _, c := range []struct {
		counted int
		capped  bool
		y, x    int // succeeded counted
	}{{4, false, 2, 2}, {10, false, 2, 2}, {3, true, 2, 1}, {1, true, 1, 0}} {
		b.store.SetFinishedCounted(c.counted)
		qs, err := b.store.CountByQueue(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(qs) != 3 {
			t.Fatalf("counted %d: %+v", c.counted, qs)
		}
		for i, q := range qs {
			want := exact[i]
			if c.capped {
				if !slices.Equal(q.Capped, []bt.State{bt.StateCanceled, bt.StateSucceeded}) {
					t.Fatalf("counted %d: %s capped %v", c.counted, q.Queue, q.Capped)
				}
				want.Capped = q.Capped
				want.Counts = maps(want.Counts)
				want.Counts[bt.StateSucceeded] = map[string]int{"x": c.x, "y": c.y}[q.Queue]
				if want.Counts[bt.StateSucceeded] == 0 {
					delete(want.Counts, bt.StateSucceeded)
				}
			}
			if !reflect.DeepEqual(q, want) {
				t.Fatalf("counted %d: %+v, want %+v", c.counted, q, want)
			}
		}
	}
}

func maps(m map[bt.State]int) map[bt.State]int {
	out := map[bt.State]int{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// The counts can be read from indexes alone: with sequential and bitmap
// scans off, the plan reads the claim index for pending tasks, the
// running index, backstop_tasks_counts for the scheduled, buffered and
// dead ones and the finished index, and never the whole table (the scan it replaced would
// read the primary key instead). The planner picks them on its own once
// the history outweighs them (docs/benchmarks.md: EXPLAIN on 200,000
// tasks); the answer is the exact scan's, with or without the index.
func TestCountByQueuePlan(t *testing.T) {
	b := setup(t)
	var tasks []*bt.Task
	for i := range 1000 {
		tk := newTask(fmt.Sprintf("q%d", i%5))
		tk.ID = fmt.Sprintf("plan-%05d", i)
		tasks = append(tasks, tk)
	}
	enqueue(t, b.store, store.EnqueueOpts{}, tasks...)
	for q := range 5 {
		var ss []store.Settlement
		for i, tk := range claim(t, b.store, fmt.Sprintf("q%d", q), 120, t0) {
			st, out := bt.StateDead, bt.OutcomePermanentError
			if i%10 == 0 {
				st, out = bt.StateSucceeded, bt.OutcomeSucceeded
			}
			ss = append(ss, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: out, Error: "boom",
				FinishedAt: t0, State: st, DeadReason: bt.ReasonPermanentError})
		}
		settle(t, b.store, ss...)
	}
	if _, err := b.store.Pool().Exec(t.Context(), "VACUUM ANALYZE backstop_tasks"); err != nil {
		t.Fatal(err)
	}
	plan, err := b.store.ExplainCounts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plan, "Seq Scan") || strings.Contains(plan, "backstop_tasks_pkey") {
		t.Fatalf("plan:\n%s", plan)
	}
	for _, index := range []string{"backstop_tasks_claim", "backstop_tasks_running", "backstop_tasks_counts", "backstop_tasks_finished"} {
		if !strings.Contains(plan, "Index Only Scan using "+index) && index != "backstop_tasks_finished" ||
			!strings.Contains(plan, index) {
			t.Fatalf("plan without %s:\n%s", index, plan)
		}
	}
	qs, err := b.store.CountByQueue(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if exact := exactCounts(t, b); !reflect.DeepEqual(qs, exact) {
		t.Fatalf("counts %+v, want %+v", qs, exact)
	}
	// Migration 00039 rolls back (the counts still answer, from other
	// plans) and applies again.
	for _, v := range []int64{38, 39} {
		if err := b.store.MigrateTo(t.Context(), v); err != nil {
			t.Fatal(err)
		}
		if again, err := b.store.CountByQueue(t.Context()); err != nil || !reflect.DeepEqual(again, qs) {
			t.Fatalf("at migration %d: %+v %v", v, again, err)
		}
	}
}

// A queue's pending tasks are listed in pages by id, either way, with
// their cursor, as the plain filter over every task selects them, through
// the claim index: with the console benchmark's shape (dead letters whose
// ids sort first, then pending tasks, half of them the queue's), the plan
// reads the claim index instead of walking the primary key past the dead
// letters.
func TestListQueuePending(t *testing.T) {
	b := setup(t)
	var tasks []*bt.Task
	for _, prefix := range []string{"dead", "task"} {
		for i := range 1000 {
			tk := newTask(fmt.Sprintf("q%d", i%2))
			tk.ID = fmt.Sprintf("%s-%05d", prefix, i)
			tk.Priority = i % 3 // the claim index's order is not the ids'
			tasks = append(tasks, tk)
		}
		enqueue(t, b.store, store.EnqueueOpts{}, tasks...)
		tasks = tasks[:0]
		if prefix == "task" {
			break
		}
		for q := range 2 {
			var ss []store.Settlement
			for _, tk := range claim(t, b.store, fmt.Sprintf("q%d", q), 1000, t0) {
				ss = append(ss, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomePermanentError,
					Error: "boom", FinishedAt: t0, State: bt.StateDead, DeadReason: bt.ReasonPermanentError})
			}
			settle(t, b.store, ss...)
		}
	}
	// A few of q1's tasks running, another succeeded: not pending.
	got := claim(t, b.store, "q1", 3, t0)
	settle(t, b.store, store.Settlement{TaskID: got[0].ID, ExecutionID: got[0].ExecutionID, Outcome: bt.OutcomeSucceeded,
		FinishedAt: t0, State: bt.StateSucceeded})
	if _, err := b.store.Pool().Exec(t.Context(), "VACUUM ANALYZE backstop_tasks"); err != nil {
		t.Fatal(err)
	}
	for _, newest := range []bool{false, true} {
		all, err := b.store.List(t.Context(), store.ListFilter{Queue: "q1", Newest: newest, Limit: 10000, WithoutPayload: true})
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, tk := range all {
			if tk.State == bt.StatePending {
				want = append(want, tk.ID)
			}
		}
		if len(want) != 497 {
			t.Fatalf("q1 pending: %d", len(want))
		}
		var ids []string
		f := store.ListFilter{Queue: "q1", States: []bt.State{bt.StatePending}, Newest: newest, Limit: 40}
		for {
			page, err := b.store.List(t.Context(), f)
			if err != nil {
				t.Fatal(err)
			}
			for _, tk := range page {
				if tk.Queue != "q1" || tk.State != bt.StatePending || len(tk.Payload) == 0 {
					t.Fatalf("listed %+v", tk)
				}
				ids = append(ids, tk.ID)
			}
			if len(page) < f.Limit {
				break
			}
			f.AfterID = page[len(page)-1].ID
		}
		if !slices.Equal(ids, want) {
			t.Fatalf("newest %v: pages %v, want %v", newest, ids, want)
		}
	}
	// The primary key is read for the page's rows only, never walked
	// with the queue and state as a filter.
	plan, err := b.store.ExplainList(t.Context(), store.ListFilter{Queue: "q1", States: []bt.State{bt.StatePending}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(plan, "\n")
	for i, l := range lines[:len(lines)-1] {
		if strings.Contains(l, "using backstop_tasks_pkey") && strings.Contains(lines[i+1], "Filter: ((queue") {
			t.Fatalf("plan:\n%s", plan)
		}
	}
}
