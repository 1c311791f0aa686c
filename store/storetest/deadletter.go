package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/backstophq/backstop"
)

func (s *suite) testDeadLetters(t *testing.T) {
	t.Run("ListFilters", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.worker(&backstop.WorkerConfig{Queues: map[string]int{"a": 5, "b": 5}}, map[string]backstop.Handler{
			"perm":  backstop.HandlerFunc(func(context.Context, *backstop.Task) error { return backstop.Permanent(errors.New("nope")) }),
			"flaky": backstop.HandlerFunc(func(context.Context, *backstop.Task) error { return errors.New("again") }),
			"ok":    backstop.HandlerFunc(func(context.Context, *backstop.Task) error { return nil }),
		})
		b.enqueue(backstop.EnqueueParams{ID: "a-perm", Queue: "a", Kind: "perm", Attributes: map[string]string{"tenant": "t1"}})
		b.enqueue(backstop.EnqueueParams{ID: "b-perm", Queue: "b", Kind: "perm", Attributes: map[string]string{"tenant": "t2"}})
		b.enqueue(backstop.EnqueueParams{ID: "a-flaky", Queue: "a", Kind: "flaky", MaxAttempts: 2, Retry: sched(0), Attributes: map[string]string{"tenant": "t1"}})
		b.enqueue(backstop.EnqueueParams{ID: "a-ok", Queue: "a", Kind: "ok"})
		for _, id := range []string{"a-perm", "b-perm", "a-flaky"} {
			b.waitState(id, backstop.StateDead)
		}
		b.waitState("a-ok", backstop.StateSucceeded)
		ids := func(f backstop.ListParams) []string {
			ts, err := b.c.DeadLetters(b.ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			out := []string{}
			for _, x := range ts {
				out = append(out, x.ID)
			}
			return out
		}
		eq(t, "all", ids(backstop.ListParams{}), []string{"a-flaky", "a-perm", "b-perm"})
		eq(t, "queue", ids(backstop.ListParams{Queue: "a"}), []string{"a-flaky", "a-perm"})
		eq(t, "kind", ids(backstop.ListParams{Kind: "perm"}), []string{"a-perm", "b-perm"})
		eq(t, "reason", ids(backstop.ListParams{Reason: "attempts_exhausted"}), []string{"a-flaky"})
		eq(t, "attribute", ids(backstop.ListParams{Attrs: map[string]string{"tenant": "t1"}}), []string{"a-flaky", "a-perm"})
		eq(t, "cursor", ids(backstop.ListParams{AfterID: "a-flaky", Limit: 1}), []string{"a-perm"})
		if _, err := b.c.DeadLetters(b.ctx, backstop.ListParams{Reason: "bogus"}); !errors.Is(err, backstop.ErrInvalid) {
			t.Fatalf("bogus reason: %v", err)
		}
		got := b.get("a-flaky")
		eq(t, "history kept", outcomes(got), []backstop.Outcome{backstop.OutcomeTransientError, backstop.OutcomeTransientError})
	})
}

func (s *suite) testMigrations(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	// Migrating again is a no-op.
	if err := b.store.Migrate(b.ctx); err != nil {
		t.Fatal(err)
	}
	ms, err := b.store.MigrationStatus(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		t.Fatal("no migrations reported")
	}
	for _, m := range ms {
		if m.AppliedAt == nil {
			t.Fatalf("migration %d (%s) not applied", m.Version, m.Name)
		}
	}
}
