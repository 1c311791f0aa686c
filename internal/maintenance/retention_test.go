package maintenance_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
)

// TestRetention: a round deletes succeeded and canceled tasks finished
// longer ago than their state's retention, closed dead letters
// (discarded, resolved) last changed longer ago than theirs, and events
// older than theirs; it keeps younger ones, every open dead letter however
// old, and everything under a negative (forever) policy.
func TestRetention(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		b := setup(t, db, nil)
		quiet := slog.New(slog.DiscardHandler)
		finish := func(id string, st bt.State) {
			t.Helper()
			b.enqueue(engine.EnqueueParams{ID: id, Queue: "q", Kind: "k", MaxAttempts: 1})
			ts := b.claim("q", 1, time.Minute)
			s := store.Settlement{TaskID: ts[0].ID, ExecutionID: ts[0].ExecutionID, FinishedAt: b.clock.Now(), State: st}
			if st == bt.StateSucceeded {
				s.Outcome = bt.OutcomeSucceeded
			} else {
				s.Outcome, s.DeadReason, s.Error = bt.OutcomePermanentError, bt.ReasonPermanentError, "boom"
			}
			if oks, err := b.e.Settle(b.ctx, []store.Settlement{s}); err != nil || !oks[0] {
				t.Fatalf("settle %s: %v %v", id, oks, err)
			}
		}
		cancel := func(id string) {
			t.Helper()
			b.enqueue(engine.EnqueueParams{ID: id, Queue: "c", Kind: "k"})
			if _, err := b.s.RequestCancel(b.ctx, id, b.clock.Now()); err != nil {
				t.Fatal(err)
			}
		}
		closeDLQ := func(id string, st bt.DLQStatus) {
			t.Helper()
			now := b.clock.Now()
			if _, err := b.s.SetDLQStatus(b.ctx, store.DLQStatusChange{ID: id, Status: st, Now: now,
				Event: store.NewEvent(now, "task."+string(st), id, "", "", "test", nil)}); err != nil {
				t.Fatal(err)
			}
		}
		exists := func() map[string]bool {
			t.Helper()
			out := map[string]bool{}
			for _, id := range []string{"succeeded-old", "succeeded-new", "canceled-old", "open-old", "discarded-old", "resolved-old", "resolved-new"} {
				_, err := b.s.Get(b.ctx, id)
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					t.Fatal(err)
				}
				out[id] = err == nil
			}
			return out
		}
		check := func(what string, want map[string]bool) {
			t.Helper()
			if got := exists(); !maps.Equal(got, want) {
				t.Fatalf("%s: tasks kept %v, want %v", what, got, want)
			}
		}

		// At T0.
		finish("succeeded-old", bt.StateSucceeded)
		cancel("canceled-old")
		for _, id := range []string{"open-old", "discarded-old", "resolved-old", "resolved-new"} {
			finish(id, bt.StateDead)
		}
		closeDLQ("discarded-old", bt.DLQDiscarded)
		closeDLQ("resolved-old", bt.DLQResolved)
		// At T0+90m.
		b.clock.Advance(90 * time.Minute)
		finish("succeeded-new", bt.StateSucceeded)
		closeDLQ("resolved-new", bt.DLQResolved)
		// At T0+2h.
		b.clock.Advance(30 * time.Minute)
		all := map[string]bool{"succeeded-old": true, "succeeded-new": true, "canceled-old": true, "open-old": true,
			"discarded-old": true, "resolved-old": true, "resolved-new": true}

		forever := maintenance.RetentionPolicy{Succeeded: -1, Canceled: -1, DeadLetters: -1, Events: -1, Runs: -1}
		b.run(maintenance.NewRetention(b.s, b.e.Now, time.Minute, forever, quiet))
		check("kept forever", all)
		if evs, err := b.s.Events(b.ctx, "open-old"); err != nil || len(evs) == 0 {
			t.Fatalf("open-old's events under a forever policy: %v %v", evs, err)
		}

		p := maintenance.RetentionPolicy{Succeeded: time.Hour, Canceled: 3 * time.Hour, DeadLetters: time.Hour, Events: time.Hour, Runs: -1}
		svc := maintenance.NewRetention(b.s, b.e.Now, time.Minute, p, quiet)
		b.run(svc)
		check("after 2h", map[string]bool{"succeeded-old": false, "succeeded-new": true, "canceled-old": true, "open-old": true,
			"discarded-old": false, "resolved-old": false, "resolved-new": true})
		// The log keeps an hour: the kept open dead letter's events of T0
		// are gone, the young task's are not.
		if evs, err := b.s.Events(b.ctx, "open-old"); err != nil || len(evs) != 0 {
			t.Fatalf("open-old's events older than the log's retention: %v %v", evs, err)
		}
		if evs, err := b.s.Events(b.ctx, "succeeded-new"); err != nil || len(evs) == 0 {
			t.Fatalf("succeeded-new's events: %v %v", evs, err)
		}

		b.clock.Advance(time.Hour + time.Microsecond) // T0+3h: canceled-old's retention is over
		b.run(svc)
		check("after 3h", map[string]bool{"succeeded-old": false, "succeeded-new": false, "canceled-old": false, "open-old": true,
			"discarded-old": false, "resolved-old": false, "resolved-new": false})
	})
}

// deniedStore is a real store whose role may not delete finished tasks,
// as the least-privilege worker role of deploy/postgres/roles.sql.
type deniedStore struct{ store.Store }

func (deniedStore) DeleteFinished(context.Context, bt.State, time.Time, int) (int, error) {
	return 0, fmt.Errorf("delete tasks: %w", store.ErrPermissionDenied)
}

// TestRetentionNoDuty: a round whose deletes the database role refuses
// says ErrNoDuty (so the maintainer hands retention to a process that may
// delete), naming the cause.
func TestRetentionNoDuty(t *testing.T) {
	b := setup(t, testdb.SQLite(t), nil)
	p := maintenance.RetentionPolicy{Succeeded: time.Hour, Canceled: time.Hour, DeadLetters: time.Hour, Events: time.Hour, Runs: time.Hour}
	err := maintenance.NewRetention(deniedStore{b.s}, b.e.Now, time.Minute, p, slog.New(slog.DiscardHandler)).RunOnce(b.ctx)
	if !errors.Is(err, maintenance.ErrNoDuty) || !errors.Is(err, store.ErrPermissionDenied) {
		t.Fatalf("RunOnce: %v, want ErrNoDuty wrapping ErrPermissionDenied", err)
	}
	if err := maintenance.NewRetention(b.s, b.e.Now, time.Minute, p, slog.New(slog.DiscardHandler)).RunOnce(b.ctx); err != nil {
		t.Fatalf("RunOnce with a role that may delete: %v", err)
	}
}
