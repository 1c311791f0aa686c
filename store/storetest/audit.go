package storetest

import (
	"testing"

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
