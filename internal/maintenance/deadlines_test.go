package maintenance_test

import (
	"maps"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/internal/testdb"
)

// TestDeadlines: a waiting task (pending or scheduled) whose deadline
// passed before it could run becomes an open dead letter with reason
// expired; a task whose deadline is still ahead, and a running task past
// its deadline (its attempt decides), are left alone.
func TestDeadlines(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		b := setup(t, db, nil)
		start := b.clock.Now()
		soon := start.Add(10 * time.Second)
		b.enqueue(engine.EnqueueParams{ID: "running", Queue: "r", Kind: "k", Deadline: soon})
		b.claim("r", 1, time.Hour)
		b.enqueue(
			engine.EnqueueParams{ID: "pending", Queue: "q", Kind: "k", Deadline: soon},
			engine.EnqueueParams{ID: "scheduled", Queue: "q", Kind: "k", Delay: time.Minute, Deadline: soon},
			engine.EnqueueParams{ID: "ahead", Queue: "q", Kind: "k", Deadline: start.Add(time.Hour)},
		)
		ids := []string{"running", "pending", "scheduled", "ahead"}
		svc := maintenance.NewDeadlines(b.e, time.Second)

		b.clock.Advance(10 * time.Second) // at the deadline: not past it
		b.run(svc)
		before := map[string]bt.State{"running": bt.StateRunning, "pending": bt.StatePending, "scheduled": bt.StateScheduled, "ahead": bt.StatePending}
		if got := b.states(ids...); !maps.Equal(got, before) {
			t.Fatalf("at the deadline: %v, want %v", got, before)
		}

		b.clock.Advance(time.Second)
		b.run(svc)
		want := map[string]bt.State{"running": bt.StateRunning, "pending": bt.StateDead, "scheduled": bt.StateDead, "ahead": bt.StatePending}
		if got := b.states(ids...); !maps.Equal(got, want) {
			t.Fatalf("past the deadline: %v, want %v", got, want)
		}
		for _, id := range []string{"pending", "scheduled"} {
			d := b.get(id)
			if d.DeadReason != bt.ReasonExpired || d.DLQStatus != bt.DLQOpen || d.FinalizedAt == nil || !d.FinalizedAt.Equal(b.clock.Now()) {
				t.Fatalf("%s: reason %q, dlq %q, finalized %v; want expired, open, now", id, d.DeadReason, d.DLQStatus, d.FinalizedAt)
			}
		}
	})
}
