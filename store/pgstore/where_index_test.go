package pgstore_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/filter"
	"github.com/backstophq/backstop/store"
)

// TestWherePayloadIndex: a where's == and in on payload fields, of every
// literal type and at any depth, read the dead letters' payload GIN index
// (backstop_tasks_payload, migration 00026) when the query selects dead
// letters; the plans allow no sequential or plain index scan, so a
// condition the index cannot answer shows no index. Other queries carry
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
	for _, f := range []store.ListFilter{
		{Where: `payload.customer.id == 7`},
		{Where: `payload.customer.id == 7`, States: []bt.State{bt.StatePending}},
		{Where: `payload.customer.id == 7`, States: []bt.State{bt.StatePending, bt.StateDead}},
	} {
		if p := plan(f); strings.Contains(p, "backstop_payload_index") || strings.Contains(p, "backstop_tasks_payload") {
			t.Errorf("%+v (not dead letters only) carries the containment:\n%s", f, p)
		}
	}
	// The answer, through the index.
	got, err := b.store.List(t.Context(), store.ListFilter{Where: `payload.customer.id == 7 && payload.customer.vip == true`, States: []bt.State{bt.StateDead}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 2000 {
		if i%100 == 7 && i%7 == 0 && i < 1000 {
			want = append(want, fmt.Sprintf("pi-%04d", i))
		}
	}
	jsonEqual(t, "matches", ids(got), want)

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
