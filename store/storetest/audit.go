package storetest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// The audit stream serves the events of operator actions that name an
// actor, in log order; the same types without an actor (the engine's) and
// other types with one (a producer's enqueue) stay out.
func (s *suite) testAuditStream(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	now := b.clock.Now()
	evs := []bt.Event{
		store.AuditEvent(now, store.EventQueuePaused, "billing", "ops", "maintenance", nil),
		store.NewEvent(now, "task.enqueued", "t1", "q", "k", "ops", []byte(`{}`)),
		store.NewEvent(now, store.EventCanceled, "t2", "q", "k", "", []byte(`{}`)),
		store.AuditEvent(now, store.EventTokenRevoked, "tok-1", "cli:root", "", map[string]any{"name": "ci"}),
		store.NewEvent(now, store.EventCanceled, "t3", "q", "k", "ops", []byte(`{"reason":"wrong tenant"}`)),
	}
	for _, e := range evs {
		if err := b.store.AppendEvents(b.ctx, []bt.Event{e}); err != nil {
			t.Fatal(err)
		}
	}
	got := b.readStream("audit", 3)
	if len(got) != 3 || got[0].Type != store.EventQueuePaused || got[0].Subject != "billing" || got[0].Actor != "ops" ||
		got[1].Type != store.EventTokenRevoked || got[2].Subject != "t3" {
		t.Fatalf("audit stream: %+v", got)
	}
	if string(got[0].Body) != `{"reason":"maintenance","target":"billing"}` {
		t.Fatalf("audit body: %s", got[0].Body)
	}
	if _, err := store.ParseStream("audit.x"); err == nil {
		t.Fatal("audit.x parsed")
	}
}

// The audit stream, read a few events a page from every cursor, is the
// all stream filtered in Go (actor set, type audited): the same events in
// the same order, whether a log row holds one action or many (a bulk
// cancel's events share a row), among the rows of other types with and
// without an actor.
func (s *suite) testAuditStreamPages(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	now := b.clock.Now()
	for i := range 30 {
		var batch []bt.Event
		switch i % 5 {
		case 0:
			batch = []bt.Event{store.AuditEvent(now, store.EventQueuePaused, fmt.Sprintf("q%d", i), "ops", "", nil)}
		case 1: // a bulk action: many events of one row
			for j := range 4 {
				batch = append(batch, store.NewEvent(now, store.EventCanceled, fmt.Sprintf("t%d-%d", i, j), "q", "k", "ops", []byte(`{"reason":"bulk"}`)))
			}
		case 2: // a producer's enqueues: an actor, not an action
			for j := range 3 {
				batch = append(batch, store.NewEvent(now, "task.enqueued", fmt.Sprintf("e%d-%d", i, j), "q", "k", "ops", []byte(`{}`)))
			}
		case 3: // the engine's cancel: no actor
			batch = []bt.Event{store.NewEvent(now, store.EventCanceled, fmt.Sprintf("c%d", i), "q", "k", "", []byte(`{}`))}
		case 4:
			batch = []bt.Event{store.AuditEvent(now, store.EventTokenRevoked, fmt.Sprintf("tok-%d", i), "cli:root", "", nil),
				store.NewEvent(now, "task.claimed", fmt.Sprintf("x%d", i), "q", "k", "", []byte(`{}`))}
		}
		if err := b.store.AppendEvents(b.ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	for _, e := range b.readStream("all", 6+6*4+6*3+6+6*2) {
		if e.Actor != "" && store.IsAuditType(e.Type) {
			want = append(want, e.Type+" "+e.Subject)
		}
	}
	if len(want) != 6+6*4+6 {
		t.Fatalf("the log holds %d actions: %v", len(want), want)
	}
	audit, err := store.ParseStream("audit")
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{1, 3, 1000} {
		var got []string
		after := ""
		for range 200 {
			p, err := b.store.ReadEvents(b.ctx, store.EventQuery{Stream: audit, After: after, Limit: limit})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range p.Events {
				got = append(got, e.Type+" "+e.Subject)
			}
			if p.Next == after {
				break
			}
			after = p.Next
		}
		if !slices.Equal(got, want) {
			t.Fatalf("audit stream in pages of %d:\n got %v\nwant %v", limit, got, want)
		}
	}
}

// Turning a queue's fairness on, changing it and turning it off are
// operator actions: each writes its audit event (actor, time, target: the
// queue, reason, the attribute and weights) in its own transaction; a
// refused change and turning off a queue that was not fair write none.
func (s *suite) testFairAudit(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	ctx := backstop.WithReason(b.ctx, "tenant acme starves the others")
	if _, err := b.c.SetFair(ctx, backstop.FairQueue{Queue: "crm", By: "tenant", Weights: map[string]int{"acme": 3}}, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.SetFair(ctx, backstop.FairQueue{Queue: "crm", By: "bad key"}, "ops"); err == nil {
		t.Fatal("a bad attribute was accepted")
	}
	if removed, err := b.c.RemoveFair(b.ctx, "crm", "cli:root"); err != nil || !removed {
		t.Fatalf("remove: %v %v", removed, err)
	}
	if removed, err := b.c.RemoveFair(b.ctx, "crm", "cli:root"); err != nil || removed {
		t.Fatalf("remove again: %v %v", removed, err)
	}
	// A marker after the actions: the stream holds exactly two before it.
	if err := b.store.AppendEvents(b.ctx, []bt.Event{store.AuditEvent(b.clock.Now(), store.EventQueuePaused, "end", "ops", "", nil)}); err != nil {
		t.Fatal(err)
	}
	got := b.readStream("audit", 3)
	if len(got) != 3 || got[2].Subject != "end" {
		t.Fatalf("audit stream: %+v, want the set, the removal and the marker", got)
	}
	set, off := got[0], got[1]
	if set.Type != store.EventFairSet || set.Subject != "crm" || set.Actor != "ops" || set.Time.IsZero() {
		t.Fatalf("set: %+v", set)
	}
	if string(set.Body) != `{"by":"tenant","reason":"tenant acme starves the others","target":"crm","weights":{"acme":3}}` {
		t.Fatalf("set body: %s", set.Body)
	}
	if off.Type != store.EventFairRemoved || off.Subject != "crm" || off.Actor != "cli:root" || string(off.Body) != `{"target":"crm"}` {
		t.Fatalf("removed: %+v %s", off, off.Body)
	}
}
