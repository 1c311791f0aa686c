package pgstore_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// TestPayloadIndexSkipsEmptyPayloads: migration 00068 on a database
// written by the version before it (67) leaves the tasks whose payload is
// {} out of the payload GIN index: a batch enqueue of such tasks (by COPY)
// writes nothing into the index, where at 67 it grew; payloads of every
// other shape (null, [], a scalar, an object with fields, a spilled {})
// are still found through it. The where answers over waiting tasks, dead
// letters and every state are those of the version before, rolled back
// and migrated again too, and the indexed wheres still read the index.
func TestPayloadIndexSkipsEmptyPayloads(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := storeAt(t, 67)
	n := 0
	batch := func(payload string, count int, opts store.EnqueueOpts) []*bt.Task {
		var ts []*bt.Task
		for range count {
			tk := newTask("ep")
			tk.ID = fmt.Sprintf("ep-%04d", n)
			tk.Payload = json.RawMessage(payload)
			ts, n = append(ts, tk), n+1
		}
		enqueue(t, s, opts, ts...)
		return ts
	}
	batch(`{}`, 20, store.EnqueueOpts{}) // copied
	batch(`{"a":1}`, 5, store.EnqueueOpts{})
	batch(`{}`, 40, store.EnqueueOpts{})
	batch(`{"a":1}`, 5, store.EnqueueOpts{})
	batch(`{"a":null}`, 10, store.EnqueueOpts{})
	batch(`null`, 5, store.EnqueueOpts{})
	batch(`[]`, 5, store.EnqueueOpts{})
	batch(`1`, 5, store.EnqueueOpts{})
	batch(`{}`, 5, store.EnqueueOpts{InlineLimit: 1}) // spilled: NULL in the row
	// The first 20 {} tasks and 5 of {"a":1} become dead letters (the
	// claim takes the lowest ids first).
	var ss []store.Settlement
	for _, tk := range claim(t, s, "ep", 25, t0) {
		ss = append(ss, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomePermanentError,
			Error: "no", FinishedAt: t0, State: bt.StateDead, DeadReason: bt.ReasonPermanentError})
	}
	settle(t, s, ss...)

	wheres := []string{`payload.a == 1`, `payload.a == null`, `payload == null`, `payload == 1`, `payload.a in [1, null]`,
		`!(payload.a == 1)`, `has(payload.a)`, `payload.a == 1 || payload == 1`}
	read := func() map[string][]string {
		t.Helper()
		out := map[string][]string{}
		for _, w := range wheres {
			for _, states := range [][]bt.State{nil, {bt.StatePending}, {bt.StateDead}, {bt.StatePending, bt.StateDead}} {
				got, err := s.List(ctx, store.ListFilter{Where: w, States: states, Limit: 1000})
				if err != nil {
					t.Fatalf("where %q on %v: %v", w, states, err)
				}
				ids := ids(got)
				slices.Sort(ids)
				out[fmt.Sprintf("%s %v", w, states)] = ids
			}
		}
		return out
	}
	before := read()
	if got := len(before["payload.a == 1 []"]); got != 10 {
		t.Fatalf("before the migration: payload.a == 1 found %d tasks, want 10", got)
	}
	if got := len(before["!(payload.a == 1) []"]); got != 10 { // {"a":null}: a missing field is no match
		t.Fatalf("before the migration: !(payload.a == 1) found %d tasks, want 10", got)
	}
	if got := len(before["payload.a == 1 [dead]"]); got != 5 {
		t.Fatalf("before the migration: payload.a == 1 found %d dead letters, want 5", got)
	}

	size := func() int64 {
		t.Helper()
		var b int64
		if err := s.Pool().QueryRow(ctx, "SELECT pg_relation_size('backstop_tasks_payload')").Scan(&b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	// emptyGrows enqueues 3,000 tasks with {} by COPY (batches of 1,000)
	// and says whether the index grew.
	emptyGrows := func() bool {
		t.Helper()
		was := size()
		for range 3 {
			ts := make([]*bt.Task, 1000)
			for i := range ts {
				ts[i] = newTask("ep-bulk")
				ts[i].Payload = json.RawMessage(`{}`)
			}
			enqueue(t, s, store.EnqueueOpts{}, ts...)
		}
		return size() > was
	}
	if !emptyGrows() {
		t.Fatal("at 67 the payload index did not grow with 3,000 tasks with {}: the measure sees nothing")
	}

	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, "ANALYZE backstop_tasks"); err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, "answers after the migration", read(), before)
	if emptyGrows() {
		t.Error("after the migration the payload index grew with 3,000 tasks with {}")
	}
	noScan := map[string]string{"enable_seqscan": "off", "enable_indexscan": "off"}
	for _, f := range []store.ListFilter{
		{Where: `payload.a == 1`},
		{Where: `payload.a in [1, 2]`, States: []bt.State{bt.StatePending}},
	} { // the dead letters' plans: TestWherePayloadIndex (25 dead letters here: another index is cheaper)
		p, err := s.ExplainList(ctx, f, noScan)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(p, "backstop_tasks_payload") {
			t.Errorf("%+v after the migration reads no payload index:\n%s", f, p)
		}
	}
	// Payloads with fields still go into the index.
	was := size()
	for range 2 {
		ts := make([]*bt.Task, 1000)
		for i := range ts {
			ts[i] = newTask("ep-bulk")
			ts[i].Payload = json.RawMessage(fmt.Sprintf(`{"customer":%d}`, i))
		}
		enqueue(t, s, store.EnqueueOpts{}, ts...)
	}
	if size() <= was {
		t.Error("after the migration the payload index did not grow with 2,000 payloads with fields")
	}
	if got, err := s.List(ctx, store.ListFilter{Where: `payload.customer == 7`, Queue: "ep-bulk", Limit: 10}); err != nil || len(got) != 2 {
		t.Errorf("payload.customer == 7: %d tasks (%v), want 2", len(got), err)
	}
	if got, err := s.List(ctx, store.ListFilter{Where: `!has(payload.customer)`, Queue: "ep-bulk", Limit: 10000}); err != nil || len(got) != 6000 {
		t.Errorf("!has(payload.customer): %d tasks (%v), want the 6,000 with {}", len(got), err)
	}

	if err := s.MigrateDownTo(ctx, 67); err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, "answers rolled back", read(), before)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, "answers migrated again", read(), before)
}
