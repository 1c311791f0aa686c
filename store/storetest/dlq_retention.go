package storetest

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/store"
)

// testRetentionNeverTakesOpen: the retention service, run with the
// tiniest ages over open, discarded, resolved and replayed (--new-id) dead
// letters, succeeded, canceled and waiting tasks, deletes exactly what its
// policy allows: the closed dead letters and the finished tasks. Open dead
// letters, with their executions and history, stay however old they get,
// and so does everything that still waits; the operator's default purge
// does not take them either.
func (s *suite) testRetentionNeverTakesOpen(t *testing.T) {
	t.Parallel()
	b := s.setup(t, &backstop.Config{InlinePayloadLimit: 64})
	for _, id := range []string{"open-1", "open-2", "open-big", "discarded", "resolved", "replayed"} {
		payload := `{"n":1}`
		if id == "open-big" {
			payload = `{"big":"` + strings.Repeat("x", 200) + `"}` // spilled
		}
		b.enqueue(backstop.EnqueueParams{ID: id, Queue: "dlq", Kind: "k", Payload: []byte(payload)})
	}
	b.kill("dlq", "broken")
	if _, err := b.c.Discard(b.ctx, backstop.DiscardParams{ID: "discarded", Reason: "obsolete"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.Resolve(b.ctx, backstop.ResolveParams{ID: "resolved", Reason: "by hand"}); err != nil {
		t.Fatal(err)
	}
	copyID := b.replay(backstop.ReplayParams{ID: "replayed", NewID: true}).NewID
	b.enqueue(backstop.EnqueueParams{ID: "succeeded", Queue: "done", Kind: "k"})
	b.enqueue(backstop.EnqueueParams{ID: "canceled", Queue: "other", Kind: "k"})
	b.enqueue(backstop.EnqueueParams{ID: "scheduled", Queue: "other", Kind: "k", Delay: 24 * time.Hour})
	if _, err := b.c.Cancel(b.ctx, "canceled"); err != nil {
		t.Fatal(err)
	}
	now := b.clock.Now()
	claimed, err := b.store.Claim(b.ctx, store.ClaimParams{Queue: "done", WorkerID: "w", Max: 1, Now: now, Lease: time.Minute})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %d, %v", len(claimed), err)
	}
	if _, err := b.store.Settle(b.ctx, []store.Settlement{{TaskID: "succeeded", ExecutionID: claimed[0].ExecutionID,
		FinishedAt: now, Outcome: bt.OutcomeSucceeded, State: bt.StateSucceeded}}); err != nil {
		t.Fatal(err)
	}

	openBefore := map[string][2]int{} // executions, events
	for _, id := range []string{"open-1", "open-2", "open-big"} {
		got := b.get(id)
		evs, err := b.c.Events(b.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		openBefore[id] = [2]int{len(got.Executions), len(evs)}
	}
	ids := func() []string {
		t.Helper()
		ts, err := b.c.List(b.ctx, backstop.ListParams{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, x := range ts {
			out = append(out, x.ID)
		}
		slices.Sort(out)
		return out
	}
	want := []string{"open-1", "open-2", "open-big", "scheduled", copyID}
	slices.Sort(want)

	policy := maintenance.RetentionPolicy{Succeeded: time.Nanosecond, Canceled: time.Nanosecond,
		DeadLetters: time.Nanosecond, Events: -1}
	svc := maintenance.NewRetention(b.store, b.clock.Now, time.Second, policy, slog.New(slog.DiscardHandler))
	b.clock.Advance(time.Minute)
	if err := svc.RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	eq(t, "tasks after the retention service", strings.Join(ids(), ","), strings.Join(want, ","))

	// Ten years on, and the operator's purge with its defaults, change
	// nothing more.
	b.clock.Advance(10 * 365 * 24 * time.Hour)
	if err := svc.RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := b.c.PurgeDLQ(b.ctx, backstop.PurgeParams{}); err != nil || n != 0 {
		t.Fatalf("default purge: %d, %v", n, err)
	}
	eq(t, "tasks ten years on", strings.Join(ids(), ","), strings.Join(want, ","))
	for id, before := range openBefore {
		got := b.get(id)
		evs, err := b.c.Events(b.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, id+" state", got.State, bt.StateDead)
		eq(t, id+" dlq_status", got.DLQStatus, bt.DLQOpen)
		eq(t, id+" executions and events", [2]int{len(got.Executions), len(evs)}, before)
		if id == "open-big" && !strings.Contains(string(got.Payload), strings.Repeat("x", 200)) {
			t.Fatalf("open-big's spilled payload: %s", got.Payload)
		}
	}
}
