package pgstore_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/filter"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

// TestWherePayloadIndex: a where's == and in on payload fields, of every
// literal type and at any depth, read the payload GIN index
// (backstop_tasks_payload, migrations 00026 and 00038) when the query
// selects dead letters or waiting tasks, or tasks of any state; the plans
// allow no sequential or plain index scan, so a condition the index cannot
// answer shows no index. Queries of states the index does not hold carry
// no containment (it would cost each row the index's expression). The
// answers are the conformance suite's (Where*, WhereIndex).
func TestWherePayloadIndex(t *testing.T) {
	b := setup(t)
	var tasks []*bt.Task
	for i := range 2000 {
		tk := newTask("pi")
		tk.ID = fmt.Sprintf("pi-%04d", i)
		note := `"n"`
		if i%50 == 0 {
			note = "null"
		}
		tk.Payload = json.RawMessage(fmt.Sprintf(`{"customer":{"id":%d,"name":"c%d","vip":%t},"note":%s,"tags":["a"]}`, i%100, i%100, i%7 == 0, note))
		tasks = append(tasks, tk)
	}
	enqueue(t, b.store, store.EnqueueOpts{}, tasks...)
	// Half of them dead letters (the claim takes the lowest ids first).
	var ss []store.Settlement
	for _, tk := range claim(t, b.store, "pi", 1000, t0) {
		ss = append(ss, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomePermanentError,
			Error: "no", FinishedAt: t0, State: bt.StateDead, DeadReason: bt.ReasonPermanentError})
	}
	settle(t, b.store, ss...)
	// Matches the index does not hold: 10 running and 10 succeeded tasks.
	var pr []*bt.Task
	for i := range 20 {
		tk := newTask("pr")
		tk.ID = fmt.Sprintf("pr-%04d", i)
		tk.Payload = json.RawMessage(`{"customer":{"id":7,"vip":true}}`)
		pr = append(pr, tk)
	}
	enqueue(t, b.store, store.EnqueueOpts{}, pr...)
	ss = nil
	for _, tk := range claim(t, b.store, "pr", 20, t0)[:10] {
		ss = append(ss, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomeSucceeded, FinishedAt: t0, State: bt.StateSucceeded})
	}
	settle(t, b.store, ss...)
	if _, err := b.store.Pool().Exec(t.Context(), "ANALYZE backstop_tasks"); err != nil {
		t.Fatal(err)
	}
	noScan := map[string]string{"enable_seqscan": "off", "enable_indexscan": "off"}
	plan := func(f store.ListFilter) string {
		t.Helper()
		p, err := b.store.ExplainList(t.Context(), f, noScan)
		if err != nil {
			t.Fatalf("explain %q: %v", f.Where, err)
		}
		return p
	}
	for _, w := range []string{
		`payload.customer.id == 7`,
		`7.0 == payload.customer.id`,
		`payload["customer"].name == "c7"`,
		`payload.customer.vip == true`,
		`payload.note == null`,
		`payload.customer.id in [7, 8]`,
		`payload.customer.id == 7 && payload.customer.name > "c"`,
		`payload.customer.id == 7 || payload.customer.name == "c8"`,
		`attributes.tenant == "acme" && payload.customer.id == 7`,
	} {
		for _, f := range []store.ListFilter{
			{Where: w, States: []bt.State{bt.StateDead}},
			{Where: w, States: []bt.State{bt.StateDead}, Queue: "pi", WithoutPayload: true},
			{Where: w, States: []bt.State{bt.StateDead}, Newest: true, DLQStatuses: []bt.DLQStatus{bt.DLQOpen}},
		} {
			if p := plan(f); !strings.Contains(p, "backstop_tasks_payload") {
				t.Errorf("where %q (%+v) reads no payload index:\n%s", w, f, p)
			}
		}
	}
	for _, w := range []string{
		`payload.customer.id > 7`,
		`payload.customer.id != 7`,
		`!(payload.customer.id == 7)`,
		`has(payload.customer.id)`,
		`payload.customer.id == 7 || payload.customer.id > 90`,
		`attributes.tenant == "acme"`,
	} {
		if p := plan(store.ListFilter{Where: w, States: []bt.State{bt.StateDead}}); strings.Contains(p, "backstop_tasks_payload") {
			t.Errorf("where %q reads the payload index, which cannot answer it:\n%s", w, p)
		}
	}
	// Waiting tasks are in the index too (migration 00038), and a where
	// over every state reads it for them (one arm per index of states).
	for _, f := range []store.ListFilter{
		{Where: `payload.customer.id == 7`},
		{Where: `payload.customer.id in [7, 8]`, Newest: true, WithoutPayload: true},
		{Where: `payload.customer.id == 7`, States: []bt.State{bt.StatePending}},
		{Where: `payload.customer.id == 7`, States: []bt.State{bt.StatePending, bt.StateDead}},
		{Where: `payload.customer.id == 7`, States: []bt.State{bt.StateScheduled, bt.StateBuffered}, Queue: "pi"},
	} {
		// The queue's scheduled and buffered tasks (none here) may come
		// from their own index (migration 00039) instead: no scan either.
		if p := plan(f); !strings.Contains(p, "backstop_tasks_payload") && (f.Queue == "" || !strings.Contains(p, "backstop_tasks_counts")) {
			t.Errorf("%+v reads no payload index:\n%s", f, p)
		}
	}
	for _, f := range []store.ListFilter{
		{Where: `payload.customer.id == 7`, States: []bt.State{bt.StateRunning}},
		{Where: `payload.customer.id == 7`, States: []bt.State{bt.StatePending, bt.StateSucceeded}},
		{Where: `payload.customer.id > 7`},
	} {
		if p := plan(f); strings.Contains(p, "backstop_payload_index") || strings.Contains(p, "backstop_tasks_payload") {
			t.Errorf("%+v (tasks the index does not hold, or no condition it answers) carries the containment:\n%s", f, p)
		}
	}
	// The answers, through the index: the dead letters, the pending tasks,
	// both, every state (the conformance suite's Where tests check the
	// rest against Go).
	want := func(in func(i int) bool, prs ...bt.State) []string {
		out := []string{}
		for i := range 2000 {
			if i%100 == 7 && i%7 == 0 && in(i) {
				out = append(out, fmt.Sprintf("pi-%04d", i))
			}
		}
		for _, st := range prs {
			from := map[bt.State]int{bt.StateSucceeded: 0, bt.StateRunning: 10}[st]
			for i := from; i < from+10; i++ {
				out = append(out, fmt.Sprintf("pr-%04d", i))
			}
		}
		return out
	}
	for _, c := range []struct {
		states []bt.State
		want   []string
	}{
		{[]bt.State{bt.StateDead}, want(func(i int) bool { return i < 1000 })},
		{[]bt.State{bt.StatePending}, want(func(i int) bool { return i >= 1000 })},
		{[]bt.State{bt.StatePending, bt.StateDead}, want(func(int) bool { return true })},
		{nil, want(func(int) bool { return true }, bt.StateSucceeded, bt.StateRunning)},
		{[]bt.State{bt.StateRunning, bt.StateSucceeded}, want(func(int) bool { return false }, bt.StateSucceeded, bt.StateRunning)},
	} {
		got, err := b.store.List(t.Context(), store.ListFilter{Where: `payload.customer.id == 7 && payload.customer.vip == true`, States: c.states, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, fmt.Sprintf("matches in %v", c.states), ids(got), c.want)
	}

	// Duplicate keys: the last one counts, in the json operators, in jsonb
	// (the index) and in Go (SQLite's json_extract reads the first: not
	// the conformance suite's).
	dup := map[string]string{"dup-1": `{"v":1,"v":2}`, "dup-2": `{"v":2,"v":1}`, "dup-3": `{"o":{"v":1},"o":{"v":2}}`}
	for id, p := range dup {
		tk := newTask("dup")
		tk.ID, tk.Payload = id, json.RawMessage(p)
		enqueue(t, b.store, store.EnqueueOpts{}, tk)
	}
	ss = nil
	for _, tk := range claim(t, b.store, "dup", 10, t0) {
		ss = append(ss, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomePermanentError,
			Error: "no", FinishedAt: t0, State: bt.StateDead, DeadReason: bt.ReasonPermanentError})
	}
	settle(t, b.store, ss...)
	for _, w := range []string{`payload.v == 2`, `payload.v == 1`, `payload.o.v == 2`, `payload.o.v in [1]`} {
		x, err := filter.Compile(w)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{}
		for _, id := range []string{"dup-1", "dup-2", "dup-3"} {
			if x.Match(json.RawMessage(dup[id]), nil) {
				want = append(want, id)
			}
		}
		got, err := b.store.List(t.Context(), store.ListFilter{Queue: "dup", Where: w, States: []bt.State{bt.StateDead}})
		if err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, "duplicate keys: "+w, ids(got), want)
	}
}

// TestWhereArmsCoverStates: a where over every state is split by the
// indexes of states (pgstore's whereArms); each state must be in exactly
// one arm, or a task of a state left out would never match.
func TestWhereArmsCoverStates(t *testing.T) {
	seen := map[bt.State]int{}
	for _, arm := range pgstore.WhereArms {
		for _, st := range arm {
			seen[st]++
		}
	}
	for _, st := range bt.States {
		if seen[st] != 1 {
			t.Errorf("state %s is in %d arms, want 1", st, seen[st])
		}
	}
	if len(seen) != len(bt.States) {
		t.Errorf("the arms name %d states, bt.States has %d", len(seen), len(bt.States))
	}
}
