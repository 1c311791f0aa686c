package pgstore_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

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
