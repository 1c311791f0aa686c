package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
)

// testSummaryList: a listing WithoutPayload (the API's summaries) returns
// the same tasks, in the same order and with the same fields, as the full
// listing, but no payload, and PayloadSize is the length of the payload Get
// returns: inline or spilled, after an append merge and after a patched
// replay changed it. Filters, the cursor and the limit apply as to the full
// listing, for tasks and for dead letters.
func (s *suite) testSummaryList(t *testing.T) {
	t.Parallel()
	b := s.setup(t, &backstop.Config{InlinePayloadLimit: 256,
		Kinds: map[string]backstop.KindConfig{"collect": {MergeRule: backstop.MergeAppend}}})
	var ids []string
	for i := range 7 {
		// Sizes on both sides of the inline limit.
		p := json.RawMessage(fmt.Sprintf(`{"i":%d,"blob":"%s"}`, i, strings.Repeat("x", i*100)))
		ids = append(ids, b.enqueue(backstop.EnqueueParams{Queue: "sum", Kind: "k", Payload: p,
			Attributes: map[string]string{"half": fmt.Sprint(i % 2)}}).ID)
	}
	// An append merge grows a payload past the inline limit.
	m := b.enqueue(backstop.EnqueueParams{Queue: "sum", Kind: "collect", MergeKey: "m", Payload: json.RawMessage(`"` + strings.Repeat("a", 200) + `"`)})
	b.enqueue(backstop.EnqueueParams{Queue: "sum", Kind: "collect", MergeKey: "m", Payload: json.RawMessage(`"` + strings.Repeat("b", 200) + `"`)})
	ids = append(ids, m.ID)
	// Dead letters, one of them replayed with a patch that changes its size.
	d1 := b.dead(backstop.EnqueueParams{ID: "sum-dead-1", Queue: "sumdead", Kind: "k", Payload: json.RawMessage(`{"a":1}`), MaxAttempts: 1})
	b.dead(backstop.EnqueueParams{ID: "sum-dead-2", Queue: "sumdead", Kind: "k",
		Payload: json.RawMessage(`{"big":"` + strings.Repeat("y", 1000) + `"}`), MaxAttempts: 1})
	b.replay(backstop.ReplayParams{ID: d1.ID, MergePatch: json.RawMessage(`{"added":"` + strings.Repeat("z", 500) + `"}`)})

	spilled := 0
	compare := func(what string, f backstop.ListParams, list func(backstop.ListParams) ([]*backstop.Task, error)) int {
		t.Helper()
		full, err := list(f)
		if err != nil {
			t.Fatalf("%s: full list: %v", what, err)
		}
		f.WithoutPayload = true
		sum, err := list(f)
		if err != nil {
			t.Fatalf("%s: summary list: %v", what, err)
		}
		eq(t, what+": count", len(sum), len(full))
		for i, st := range sum {
			ft := full[i]
			if st.Payload != nil {
				t.Fatalf("%s: summary %s carries a payload (%d bytes)", what, st.ID, len(st.Payload))
			}
			got := b.get(st.ID)
			eq(t, what+": payload_size of "+st.ID, st.PayloadSize, len(got.Payload))
			eq(t, what+": full payload of "+st.ID, string(ft.Payload), string(got.Payload))
			if st.PayloadSpilled {
				spilled++
			}
			// Every other field is the full listing's.
			cp := *ft
			cp.Payload = nil
			eq(t, what+": summary of "+st.ID, *st, cp)
		}
		return len(sum)
	}
	list := func(f backstop.ListParams) ([]*backstop.Task, error) { return b.c.List(b.ctx, f) }
	eq(t, "all", compare("all", backstop.ListParams{Limit: 1000}, list), len(ids)+2)
	eq(t, "queue", compare("queue", backstop.ListParams{Queue: "sum"}, list), len(ids))
	eq(t, "attr", compare("attr", backstop.ListParams{Queue: "sum", Attrs: map[string]string{"half": "1"}}, list), 3)
	eq(t, "kind", compare("kind", backstop.ListParams{Kind: "collect"}, list), 1)
	dead := func(f backstop.ListParams) ([]*backstop.Task, error) { return b.c.DeadLetters(b.ctx, f) }
	eq(t, "dead letters", compare("dead letters", backstop.ListParams{}, dead), 1) // the other was replayed
	if spilled == 0 {
		t.Fatal("no spilled payload was listed: the test does not cover them")
	}
	// Paged by cursor, the summaries visit every task once, in id order.
	var seen []string
	after := ""
	for {
		page, err := b.c.List(b.ctx, backstop.ListParams{Queue: "sum", Limit: 3, AfterID: after, WithoutPayload: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range page {
			seen = append(seen, task.ID)
		}
		if len(page) < 3 {
			break
		}
		after = page[len(page)-1].ID
	}
	eq(t, "paged ids", seen, ids)
	// Newest first: the same ids in reverse, paged toward older ones.
	seen = nil
	after = ""
	for {
		page, err := b.c.List(b.ctx, backstop.ListParams{Queue: "sum", Limit: 3, AfterID: after, WithoutPayload: true, Newest: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range page {
			seen = append(seen, task.ID)
		}
		if len(page) < 3 {
			break
		}
		after = page[len(page)-1].ID
	}
	rev := slices.Clone(ids)
	slices.Reverse(rev)
	eq(t, "paged ids newest first", seen, rev)
}

// testExportInSlices: ExportDLQ reads each page's payloads in slices of
// about 1 MiB; 3 MB of dead letters (inline and spilled) still export every
// payload whole, once each, in id order, and a limit stops it.
func (s *suite) testExportInSlices(t *testing.T) {
	t.Parallel()
	b := s.setup(t, &backstop.Config{InlinePayloadLimit: 150 << 10})
	want := map[string]string{}
	var ids []string
	for i := range 30 {
		n := 50<<10 + i*5<<10 // 50 KiB to 195 KiB: some past the inline limit
		p := fmt.Sprintf(`{"i":%d,"blob":"%s"}`, i, strings.Repeat("e", n))
		task := b.enqueue(backstop.EnqueueParams{Queue: "exp", Kind: "k", Payload: json.RawMessage(p), MaxAttempts: 1})
		want[task.ID] = p
		ids = append(ids, task.ID)
	}
	b.kill("exp", "boom")
	var got []string
	n, err := b.c.ExportDLQ(b.ctx, backstop.ListParams{Queue: "exp"}, func(d backstop.DeadLetterExport) error {
		if string(d.Payload) != want[d.ID] {
			t.Fatalf("export: %s payload of %d bytes, want %d", d.ID, len(d.Payload), len(want[d.ID]))
		}
		got = append(got, d.ID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "exported", n, len(ids))
	eq(t, "exported ids", got, ids)
	got = nil
	n, err = b.c.ExportDLQ(b.ctx, backstop.ListParams{Queue: "exp", Limit: 25}, func(d backstop.DeadLetterExport) error {
		got = append(got, d.ID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "exported with a limit", n, 25)
	eq(t, "exported ids with a limit", got, ids[:25])
}
