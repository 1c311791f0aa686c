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

// TestLeaseExpiry: an attempt whose lease ran out is settled with outcome
// lease_expired — retried on its policy's schedule while attempts remain,
// a dead letter (attempts_exhausted) when none do, canceled when
// cancellation was requested (even on its last attempt) — and an attempt
// whose lease is current is left running.
func TestLeaseExpiry(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		b := setup(t, db, &engine.Config{Retry: &bt.RetryPolicy{Schedule: []bt.Duration{bt.Duration(time.Minute)}}})
		b.enqueue(
			engine.EnqueueParams{ID: "retry", Queue: "q", Kind: "k", MaxAttempts: 3},
			engine.EnqueueParams{ID: "last", Queue: "q", Kind: "k", MaxAttempts: 1},
			// Its last attempt: canceled, not a dead letter.
			engine.EnqueueParams{ID: "cancel", Queue: "q", Kind: "k", MaxAttempts: 1},
		)
		if got := b.claim("q", 10, 10*time.Second); len(got) != 3 {
			t.Fatalf("claimed %d, want 3", len(got))
		}
		b.enqueue(engine.EnqueueParams{ID: "current", Queue: "q", Kind: "k", MaxAttempts: 3})
		held := b.claim("q", 10, time.Hour)[0]
		if _, err := b.s.RequestCancel(b.ctx, "cancel", b.clock.Now()); err != nil {
			t.Fatal(err)
		}
		ids := []string{"retry", "last", "cancel", "current"}
		running := map[string]bt.State{"retry": bt.StateRunning, "last": bt.StateRunning, "cancel": bt.StateRunning, "current": bt.StateRunning}

		svc := maintenance.NewLeaseExpiry(b.e, time.Second)
		b.clock.Advance(10 * time.Second) // the leases end now: not yet expired
		b.run(svc)
		if got := b.states(ids...); !maps.Equal(got, running) {
			t.Fatalf("before expiry: %v, want all running", got)
		}

		b.clock.Advance(time.Second)
		now := b.clock.Now()
		b.run(svc)
		want := map[string]bt.State{"retry": bt.StateScheduled, "last": bt.StateDead, "cancel": bt.StateCanceled, "current": bt.StateRunning}
		if got := b.states(ids...); !maps.Equal(got, want) {
			t.Fatalf("after expiry: %v, want %v", got, want)
		}
		for _, id := range []string{"retry", "last", "cancel"} {
			exs := b.executions(id)
			if len(exs) != 1 || exs[0].Outcome != bt.OutcomeLeaseExpired || exs[0].FinishedAt == nil || !exs[0].FinishedAt.Equal(now) {
				t.Fatalf("%s: executions %+v, want one lease_expired at %s", id, exs, now)
			}
		}
		retry := b.get("retry")
		eq(t, "retry run_at", retry.RunAt, now.Add(time.Minute))
		last := b.get("last")
		eq(t, "last reason", last.DeadReason, bt.ReasonAttemptsExhausted)
		eq(t, "last dlq status", last.DLQStatus, bt.DLQOpen)
		cur := b.get("current")
		eq(t, "current execution", cur.ExecutionID, held.ExecutionID)
		if cur.LeaseExpiresAt == nil || !cur.LeaseExpiresAt.Equal(*held.LeaseExpiresAt) {
			t.Fatalf("current lease %v, want %v unchanged", cur.LeaseExpiresAt, held.LeaseExpiresAt)
		}

		// Settled once: another round finds nothing more to do.
		b.run(svc)
		if exs := b.executions("retry"); len(exs) != 1 {
			t.Fatalf("retry settled again: %+v", exs)
		}
	})
}
