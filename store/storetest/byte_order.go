package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// byteOrderIDs are task ids (and, with a "q" appended, queue names) whose
// order by their bytes differs from a natural-language collation's, which
// sets case and punctuation aside at first (en-US: aa < Ab < a_b < a-b).
var byteOrderIDs = []string{"a-b", "a.b", "a0", "a:b", "aB", "a_b", "aa", "Ab", "B", "b", "Z", "z-1", "z1", "Z_"}

// testByteOrder: lists order ids, and page past a cursor, by the ids'
// bytes on every store, whatever the database's collation (a Postgres
// database made with an ICU or libc locale included): forward, newest
// first, within a queue, the dead letters; queues list by their names'
// bytes.
func (s *suite) testByteOrder(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	queues := []string{"Bq", "aq", "a-q", "a_q"}
	for i, id := range byteOrderIDs {
		b.enqueue(backstop.EnqueueParams{ID: id, Queue: queues[i%len(queues)], Kind: "k"})
	}
	sorted := slices.Clone(byteOrderIDs)
	slices.Sort(sorted)
	pages := func(what string, list func(context.Context, backstop.ListParams) ([]*backstop.Task, error), f backstop.ListParams) []string {
		t.Helper()
		var out []string
		f.Limit = 3
		for {
			ts, err := list(b.ctx, f)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			for _, x := range ts {
				out = append(out, x.ID)
			}
			if len(ts) < f.Limit {
				return out
			}
			f.AfterID = ts[len(ts)-1].ID
		}
	}
	list := func(ctx context.Context, f backstop.ListParams) ([]*backstop.Task, error) { return b.c.List(ctx, f) }
	eq(t, "list", pages("list", list, backstop.ListParams{}), sorted)
	eq(t, "newest first", pages("newest", list, backstop.ListParams{Newest: true}), reversed(sorted))
	var inQueue []string
	for _, id := range sorted {
		if i := slices.Index(byteOrderIDs, id); queues[i%len(queues)] == "a-q" {
			inQueue = append(inQueue, id)
		}
	}
	eq(t, "a queue", pages("queue", list, backstop.ListParams{Queue: "a-q"}), inQueue)

	qs, err := b.c.Queues(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, q := range qs {
		names = append(names, q.Name)
	}
	eq(t, "queues", names, []string{"Bq", "a-q", "a_q", "aq"})

	// Every task dead: the dead letters page by id too.
	now := b.clock.Now()
	var ss []store.Settlement
	for _, q := range queues {
		ts, err := b.store.Claim(b.ctx, store.ClaimParams{Queue: q, WorkerID: "w", Max: 100, Now: now, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ts {
			ss = append(ss, store.Settlement{TaskID: x.ID, ExecutionID: x.ExecutionID, Outcome: bt.OutcomePermanentError,
				Error: "boom", FinishedAt: now, State: bt.StateDead, DeadReason: bt.ReasonPermanentError})
		}
	}
	if len(ss) != len(byteOrderIDs) {
		t.Fatalf("claimed %d tasks, want %d", len(ss), len(byteOrderIDs))
	}
	if _, err := b.store.Settle(b.ctx, ss); err != nil {
		t.Fatal(err)
	}
	dead := func(ctx context.Context, f backstop.ListParams) ([]*backstop.Task, error) {
		return b.c.DeadLetters(ctx, f)
	}
	eq(t, "dead letters", pages("dead letters", dead, backstop.ListParams{}), sorted)
}

func reversed(s []string) []string {
	r := slices.Clone(s)
	slices.Reverse(r)
	return r
}
