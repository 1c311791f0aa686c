package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// kill makes every pending task of queue a dead letter (one failed attempt
// each), through the store as a worker would.
func (b *bundle) kill(queue, errText string) {
	b.t.Helper()
	now := b.clock.Now()
	got, err := b.store.Claim(b.ctx, store.ClaimParams{Queue: queue, WorkerID: "killer", Max: 10000, Now: now, Lease: time.Minute})
	if err != nil {
		b.t.Fatal(err)
	}
	ss := make([]store.Settlement, len(got))
	for i, task := range got {
		ss[i] = store.Settlement{TaskID: task.ID, ExecutionID: task.ExecutionID, Outcome: bt.OutcomePermanentError,
			Error: errText, FinishedAt: now, State: bt.StateDead, DeadReason: bt.ReasonPermanentError}
	}
	if _, err := b.store.Settle(b.ctx, ss); err != nil {
		b.t.Fatal(err)
	}
}

func (b *bundle) dead(p backstop.EnqueueParams) *backstop.Task {
	b.t.Helper()
	b.enqueue(p)
	b.kill(p.Queue, "boom: "+p.ID)
	return b.get(p.ID)
}

// events lists a task's dead-letter history (dlq.* events; the lifecycle
// events are checked by lifecycle.go).
func (b *bundle) events(id string) []string {
	b.t.Helper()
	evs, err := b.c.Events(b.ctx, id)
	if err != nil {
		b.t.Fatal(err)
	}
	out := []string{}
	for _, e := range evs {
		if strings.HasPrefix(e.Type, "dlq.") {
			out = append(out, e.Type+"/"+e.Actor)
		}
	}
	return out
}

func (b *bundle) replay(p backstop.ReplayParams) *backstop.ReplayResult {
	b.t.Helper()
	r, err := b.c.Replay(b.ctx, p)
	if err != nil {
		b.t.Fatalf("replay %s: %v", p.ID, err)
	}
	return r
}

// unchanged fails unless the dead letter is as it was.
func unchanged(t *testing.T, before, after *backstop.Task) {
	t.Helper()
	eq(t, "state", after.State, before.State)
	eq(t, "dlq_status", after.DLQStatus, before.DLQStatus)
	eq(t, "replay_count", after.ReplayCount, before.ReplayCount)
	eq(t, "attempt", after.Attempt, before.Attempt)
	eq(t, "payload", string(after.Payload), string(before.Payload))
	eq(t, "last_error", after.LastError, before.LastError)
}

func (s *suite) testDLQOps(t *testing.T) {
	t.Run("ReplayStore", s.testReplayStore) // dlq_store.go
	t.Run("ReplayKeepsIDPayloadAttributesHistory", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, &backstop.Config{InlinePayloadLimit: 64})
		big := `{"data":"` + strings.Repeat("x", 200) + `"}`
		for _, id := range []string{"inline", "spilled"} {
			payload := `{"n":1}`
			if id == "spilled" {
				payload = big
			}
			before := b.dead(backstop.EnqueueParams{ID: id, Queue: "q-" + id, Kind: "k", Payload: json.RawMessage(payload),
				Attributes: map[string]string{"tenant": "t1"}, Progress: backstop.Progress{Total: 10, Completed: 4}, Complexity: 2.5})
			eq(t, "spilled", before.PayloadSpilled, id == "spilled")
			r := b.replay(backstop.ReplayParams{ID: id, Actor: "alice"})
			eq(t, "replayed", r.Replayed, true)
			got := b.get(id)
			eq(t, "same id", r.Task.ID, id)
			eq(t, "state", got.State, backstop.StatePending)
			eq(t, "attempt reset", got.Attempt, 0)
			eq(t, "payload", string(got.Payload), payload)
			eq(t, "attributes", got.Attributes, map[string]string{"tenant": "t1"})
			eq(t, "progress", got.Progress, backstop.Progress{Total: 10, Completed: 4})
			eq(t, "complexity", got.Complexity, 2.5)
			eq(t, "history kept", outcomes(got), []backstop.Outcome{backstop.OutcomePermanentError})
			eq(t, "replay_count", got.ReplayCount, 1)
			eq(t, "dead_count", got.DeadCount, 1)
			eq(t, "dlq_status cleared", got.DLQStatus, bt.DLQStatus(""))
			eq(t, "last_error cleared", got.LastError, "")
			if got.LeaseExpiresAt != nil || got.FinalizedAt != nil {
				t.Fatalf("lease/finalized not cleared: %+v", got)
			}
			eq(t, "events", b.events(id), []string{"dlq.replay_requested/alice", "dlq.replayed/alice"})
			// Double replay: no longer in the DLQ.
			r = b.replay(backstop.ReplayParams{ID: id, Actor: "bob"})
			eq(t, "second replay", r.Replayed, false)
			eq(t, "still one replay", b.get(id).ReplayCount, 1)
			// The replayed task runs: a claim gets it with its payload.
			claimed := claim(t, b, "q-"+id, 10)
			eq(t, "claimed", len(claimed), 1)
			eq(t, "claimed payload", string(claimed[0].Payload), payload)
			eq(t, "claimed attempt", claimed[0].Attempt, 1)
		}
		if _, err := b.c.Replay(b.ctx, backstop.ReplayParams{ID: "nope"}); !errors.Is(err, backstop.ErrNotFound) {
			t.Fatalf("unknown id: %v", err)
		}
	})

	t.Run("ReplayOptions", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.dead(backstop.EnqueueParams{ID: "keep", Queue: "q", Kind: "k"})
		r := b.replay(backstop.ReplayParams{ID: "keep", KeepAttempts: true, Delay: time.Hour})
		eq(t, "state", r.Task.State, backstop.StateScheduled)
		eq(t, "attempt kept", r.Task.Attempt, 1)
		if d := r.Task.RunAt.Sub(b.clock.Now()); d < 59*time.Minute || d > time.Hour {
			t.Fatalf("run_at in %s, want ~1h", d)
		}
		b.dead(backstop.EnqueueParams{ID: "at", Queue: "q2", Kind: "k"})
		at := b.clock.Now().Add(2 * time.Hour).Truncate(time.Second)
		r = b.replay(backstop.ReplayParams{ID: "at", RunAt: at})
		eq(t, "run_at", r.Task.RunAt.Equal(at), true)
		if _, err := b.c.Replay(b.ctx, backstop.ReplayParams{ID: "at", RunAt: at, Delay: time.Hour}); !errors.Is(err, backstop.ErrInvalid) {
			t.Fatalf("delay and run_at: %v", err)
		}
	})

	t.Run("ConcurrentReplay", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.dead(backstop.EnqueueParams{ID: "x", Queue: "q", Kind: "k"})
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				r, err := b.c.Replay(b.ctx, backstop.ReplayParams{ID: "x", Actor: fmt.Sprint("g", i)})
				if err != nil {
					t.Error(err)
					return
				}
				if r.Replayed {
					wins.Add(1)
				}
			})
		}
		wg.Wait()
		eq(t, "exactly one replay", wins.Load(), int32(1))
		eq(t, "replay_count", b.get("x").ReplayCount, 1)
	})

	t.Run("Conflict", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		before := b.dead(backstop.EnqueueParams{ID: "idem", Queue: "q", Kind: "k", IdempotencyKey: "key-1"})
		b.enqueue(backstop.EnqueueParams{ID: "holder", Queue: "other", Kind: "k", IdempotencyKey: "key-1"})
		if _, err := b.c.Replay(b.ctx, backstop.ReplayParams{ID: "idem", Actor: "alice"}); !errors.Is(err, backstop.ErrConflict) {
			t.Fatalf("idempotency conflict: %v", err)
		}
		unchanged(t, before, b.get("idem"))
		eq(t, "refusal recorded", b.events("idem"), []string{"dlq.replay_failed/alice"})

		before = b.dead(backstop.EnqueueParams{ID: "merge", Queue: "q2", Kind: "m", MergeKey: "mk"})
		b.enqueue(backstop.EnqueueParams{ID: "waiting", Queue: "other2", Kind: "m", MergeKey: "mk"})
		if _, err := b.c.Replay(b.ctx, backstop.ReplayParams{ID: "merge"}); !errors.Is(err, backstop.ErrConflict) {
			t.Fatalf("merge conflict: %v", err)
		}
		unchanged(t, before, b.get("merge"))
		// Once the holder is gone the replay goes through.
		if _, err := b.c.Cancel(b.ctx, "holder"); err != nil {
			t.Fatal(err)
		}
		eq(t, "replayed after", b.replay(backstop.ReplayParams{ID: "idem"}).Replayed, true)
	})

	t.Run("Patch", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, &backstop.Config{InlinePayloadLimit: 100, MaxPayloadSize: 1000})
		b.dead(backstop.EnqueueParams{ID: "p", Queue: "q", Kind: "k", Payload: json.RawMessage(`{"user":{"email":"bad"},"n":1,"tags":["a"]}`)})
		op1, _ := backstop.ParsePatch("user.email=fixed@example.com")
		op2, _ := backstop.ParsePatch("n=2")
		op3, _ := backstop.ParsePatch("new.deep.flag=true")
		r := b.replay(backstop.ReplayParams{ID: "p", Patch: []backstop.PatchOp{op1, op2, op3},
			MergePatch: json.RawMessage(`{"tags":null,"extra":{"x":1}}`)})
		eq(t, "replayed", r.Replayed, true)
		var got map[string]any
		if err := json.Unmarshal(b.get("p").Payload, &got); err != nil {
			t.Fatal(err)
		}
		eq(t, "patched", got, map[string]any{"user": map[string]any{"email": "fixed@example.com"}, "n": float64(2),
			"extra": map[string]any{"x": float64(1)}, "new": map[string]any{"deep": map[string]any{"flag": true}}})

		// A patch that grows the payload past the inline limit spills it.
		b.dead(backstop.EnqueueParams{ID: "grow", Queue: "q2", Kind: "k", Payload: json.RawMessage(`{"a":1}`)})
		long := strings.Repeat("y", 300)
		op, _ := backstop.ParsePatch("a=" + long)
		b.replay(backstop.ReplayParams{ID: "grow", Patch: []backstop.PatchOp{op}})
		g := b.get("grow")
		eq(t, "spilled", g.PayloadSpilled, true)
		eq(t, "spilled payload", string(g.Payload), `{"a":"`+long+`"}`)

		// Refusals change nothing.
		before := b.dead(backstop.EnqueueParams{ID: "r", Queue: "q3", Kind: "k", Payload: json.RawMessage(`{"a":"scalar"}`)})
		for name, p := range map[string]backstop.ReplayParams{
			"through a scalar": {ID: "r", Patch: []backstop.PatchOp{{Path: "a.b", Value: json.RawMessage(`1`)}}},
			"invalid json":     {ID: "r", Patch: []backstop.PatchOp{{Path: "a", Value: json.RawMessage(`{`)}}},
			"invalid merge":    {ID: "r", MergePatch: json.RawMessage(`{`)},
			"too large":        {ID: "r", Patch: []backstop.PatchOp{{Path: "a", Value: json.RawMessage(`"` + strings.Repeat("z", 2000) + `"`)}}},
		} {
			_, err := b.c.Replay(b.ctx, p)
			if !errors.Is(err, backstop.ErrUnprocessable) || !errors.Is(err, backstop.ErrInvalid) {
				t.Fatalf("%s: %v", name, err)
			}
			unchanged(t, before, b.get("r"))
		}
	})

	t.Run("NewID", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, &backstop.Config{InlinePayloadLimit: 64})
		payload := `{"data":"` + strings.Repeat("x", 200) + `"}`
		b.dead(backstop.EnqueueParams{ID: "orig", Queue: "q", Kind: "k", Payload: json.RawMessage(payload),
			Attributes: map[string]string{"a": "b"}, Progress: backstop.Progress{Total: 5, Completed: 2}})
		r := b.replay(backstop.ReplayParams{ID: "orig", NewID: true, Actor: "carol"})
		eq(t, "replayed", r.Replayed, true)
		if r.NewID == "" || r.NewID == "orig" || r.Task.ID != r.NewID {
			t.Fatalf("new id: %+v", r)
		}
		cp := b.get(r.NewID)
		eq(t, "replayed_from", cp.ReplayedFrom, "orig")
		eq(t, "state", cp.State, backstop.StatePending)
		eq(t, "payload", string(cp.Payload), payload)
		eq(t, "attributes", cp.Attributes, map[string]string{"a": "b"})
		eq(t, "progress", cp.Progress, backstop.Progress{Total: 5, Completed: 2})
		eq(t, "no executions on the copy", len(cp.Executions), 0)
		o := b.get("orig")
		eq(t, "original state", o.State, backstop.StateDead)
		eq(t, "original status", o.DLQStatus, backstop.DLQReplayed)
		eq(t, "original executions", len(o.Executions), 1)
		eq(t, "original payload kept", string(o.Payload), payload)
		eq(t, "again", b.replay(backstop.ReplayParams{ID: "orig"}).Replayed, false)
		ls, err := b.c.DeadLetters(b.ctx, backstop.ListParams{DLQStatuses: []backstop.DLQStatus{backstop.DLQReplayed}})
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "listed as replayed", len(ls), 1)
	})

	t.Run("DieAgainCounters", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.worker(nil, map[string]backstop.Handler{"fail": backstop.HandlerFunc(func(ctx context.Context, task *backstop.Task) error {
			backstop.ReportProgress(ctx, task.Progress.Completed+1, 10)
			return backstop.Permanent(errors.New("still broken"))
		})})
		b.enqueue(backstop.EnqueueParams{ID: "d", Queue: "default", Kind: "fail"})
		first := b.waitState("d", backstop.StateDead)
		b.replay(backstop.ReplayParams{ID: "d"})
		testwait.For(t, "second death", func() bool { t := b.get("d"); return t.State == backstop.StateDead && t.DeadCount == 2 })
		got := b.get("d")
		eq(t, "dead_count", got.DeadCount, 2)
		eq(t, "replay_count", got.ReplayCount, 1)
		eq(t, "executions kept", len(got.Executions), 2)
		eq(t, "status open again", got.DLQStatus, backstop.DLQOpen)
		eq(t, "first_seen kept", got.FirstSeen.Equal(*first.FirstSeen), true)
		eq(t, "progress carried", got.Progress.Completed, 2)
	})

	t.Run("DiscardResolvePurge", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		for _, id := range []string{"d1", "r1", "open1"} {
			b.dead(backstop.EnqueueParams{ID: id, Queue: "q-" + id, Kind: "k", Payload: json.RawMessage(`{}`)})
		}
		b.enqueue(backstop.EnqueueParams{ID: "live", Queue: "live", Kind: "k"})
		if _, err := b.c.Discard(b.ctx, backstop.DiscardParams{ID: "d1"}); !errors.Is(err, backstop.ErrInvalid) {
			t.Fatalf("discard without reason: %v", err)
		}
		d, err := b.c.Discard(b.ctx, backstop.DiscardParams{ID: "d1", Reason: "obsolete", Actor: "dave"})
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "discarded", d.DLQStatus, backstop.DLQDiscarded)
		eq(t, "still dead", d.State, backstop.StateDead)
		if _, err := b.c.Discard(b.ctx, backstop.DiscardParams{ID: "d1", Reason: "again"}); !errors.Is(err, backstop.ErrNotFound) {
			t.Fatalf("discard twice: %v", err)
		}
		if _, err := b.c.Resolve(b.ctx, backstop.ResolveParams{ID: "live"}); !errors.Is(err, backstop.ErrNotFound) {
			t.Fatalf("resolve a live task: %v", err)
		}
		if _, err := b.c.Resolve(b.ctx, backstop.ResolveParams{ID: "unknown"}); !errors.Is(err, backstop.ErrNotFound) {
			t.Fatalf("resolve unknown: %v", err)
		}
		if _, err := b.c.Resolve(b.ctx, backstop.ResolveParams{ID: "r1", Note: "fixed by hand", Actor: "erin"}); err != nil {
			t.Fatal(err)
		}
		all, err := b.c.Events(b.ctx, "d1")
		if err != nil {
			t.Fatal(err)
		}
		evs := all[len(all)-1:]
		if len(evs) != 1 || evs[0].Type != "dlq.discarded" || evs[0].Actor != "dave" || !strings.Contains(string(evs[0].Body), "obsolete") || evs[0].Queue != "q-d1" {
			t.Fatalf("discard event: %+v", evs)
		}
		eq(t, "resolve event", b.events("r1"), []string{"dlq.resolved/erin"})
		eq(t, "replay a discarded one", b.replay(backstop.ReplayParams{ID: "d1"}).Replayed, false)
		ids := func(sts ...backstop.DLQStatus) []string {
			ts, err := b.c.DeadLetters(b.ctx, backstop.ListParams{DLQStatuses: sts})
			if err != nil {
				t.Fatal(err)
			}
			out := []string{}
			for _, x := range ts {
				out = append(out, x.ID)
			}
			return out
		}
		eq(t, "open", ids(backstop.DLQOpen), []string{"open1"})
		eq(t, "discarded+resolved", ids(backstop.DLQDiscarded, backstop.DLQResolved), []string{"d1", "r1"})
		if _, err := b.c.DeadLetters(b.ctx, backstop.ListParams{DLQStatuses: []backstop.DLQStatus{"bogus"}}); !errors.Is(err, backstop.ErrInvalid) {
			t.Fatalf("bogus status: %v", err)
		}
		// Purge: nothing is old enough yet.
		n, err := b.c.PurgeDLQ(b.ctx, backstop.PurgeParams{OlderThan: time.Hour})
		if err != nil || n != 0 {
			t.Fatalf("purge too early: %d, %v", n, err)
		}
		b.clock.Advance(2 * time.Hour)
		// A dry run counts them and deletes nothing.
		n, err = b.c.PurgeDLQ(b.ctx, backstop.PurgeParams{OlderThan: time.Hour, DryRun: true})
		if err != nil || n != 2 {
			t.Fatalf("purge dry run: %d, %v", n, err)
		}
		eq(t, "kept by the dry run", ids(backstop.DLQDiscarded, backstop.DLQResolved), []string{"d1", "r1"})
		// In batches of one: each deleting batch appends its record in its
		// own transaction (none for the last, empty one).
		n, err = b.store.PurgeDLQ(b.ctx, store.PurgeParams{Before: b.clock.Now().Add(-time.Hour), Limit: 1,
			Statuses: []bt.DLQStatus{bt.DLQDiscarded, bt.DLQResolved},
			Event: func(k int) bt.Event {
				return store.NewEvent(b.clock.Now(), "dlq.purged", "", "", "", "ops", []byte(fmt.Sprintf(`{"purged":%d}`, k)))
			}})
		if err != nil || n != 2 {
			t.Fatalf("purge: %d, %v", n, err)
		}
		purged := b.readStream("type.dlq.purged", 2)
		if len(purged) != 2 || string(purged[0].Body) != `{"purged":1}` || string(purged[1].Body) != `{"purged":1}` {
			t.Fatalf("purge records: %+v, want one per deleting batch", purged)
		}
		for _, id := range []string{"d1", "r1"} {
			if _, err := b.c.Get(b.ctx, id); !errors.Is(err, backstop.ErrNotFound) {
				t.Fatalf("%s survived the purge: %v", id, err)
			}
			ex, _ := b.store.Executions(b.ctx, id)
			eq(t, "executions purged", len(ex), 0)
			eq(t, "events purged", b.events(id), []string{})
		}
		eq(t, "open kept", b.get("open1").State, backstop.StateDead)
		eq(t, "live kept", b.get("live").State, backstop.StatePending)
		// Open dead letters go only when named and confirmed (issue 17).
		n, err = b.c.PurgeDLQ(b.ctx, backstop.PurgeParams{OlderThan: time.Hour, Statuses: []backstop.DLQStatus{backstop.DLQOpen}})
		if !errors.Is(err, backstop.ErrInvalid) || n != 0 || b.get("open1").State != backstop.StateDead {
			t.Fatalf("purge open unconfirmed: %d, %v", n, err)
		}
		n, err = b.c.PurgeDLQ(b.ctx, backstop.PurgeParams{OlderThan: time.Hour, Statuses: []backstop.DLQStatus{backstop.DLQOpen},
			ConfirmOpen: true})
		if err != nil || n != 1 {
			t.Fatalf("purge open: %d, %v", n, err)
		}
	})

	t.Run("ListFiltersAndExport", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.dead(backstop.EnqueueParams{ID: "e1", Queue: "q1", Kind: "k", Attributes: map[string]string{"tenant": "a"}})
		b.clock.Advance(time.Hour)
		mid := b.clock.Now()
		b.clock.Advance(time.Hour)
		b.dead(backstop.EnqueueParams{ID: "e2", Queue: "q2", Kind: "k", Attributes: map[string]string{"tenant": "b"}})
		b.dead(backstop.EnqueueParams{ID: "e3", Queue: "q3", Kind: "other"})
		if _, err := b.c.Discard(b.ctx, backstop.DiscardParams{ID: "e3", Reason: "x"}); err != nil {
			t.Fatal(err)
		}
		export := func(f backstop.ListParams) []string {
			out := []string{}
			_, err := b.c.ExportDLQ(b.ctx, f, func(d backstop.DeadLetterExport) error {
				if d.Executions == nil || len(d.Executions) != 1 {
					t.Fatalf("export %s: executions %v", d.ID, d.Executions)
				}
				line, err := json.Marshal(d)
				if err != nil || !strings.Contains(string(line), `"executions":[`) || !strings.Contains(string(line), `"events":`) {
					t.Fatalf("export line: %s %v", line, err)
				}
				out = append(out, d.ID)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		eq(t, "all", export(backstop.ListParams{}), []string{"e1", "e2", "e3"})
		eq(t, "error contains", export(backstop.ListParams{ErrorContains: "boom: e2"}), []string{"e2"})
		eq(t, "since", export(backstop.ListParams{Since: mid}), []string{"e2", "e3"})
		eq(t, "until", export(backstop.ListParams{Until: mid}), []string{"e1"})
		eq(t, "status", export(backstop.ListParams{DLQStatuses: []backstop.DLQStatus{backstop.DLQDiscarded}}), []string{"e3"})
		eq(t, "attr", export(backstop.ListParams{Attrs: map[string]string{"tenant": "b"}}), []string{"e2"})
		eq(t, "kind+limit", export(backstop.ListParams{Kind: "k", Limit: 1}), []string{"e1"})
	})

	t.Run("Redrive", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		for i := range 30 {
			q := "a"
			if i%3 == 0 {
				q = "b"
			}
			b.enqueue(backstop.EnqueueParams{ID: fmt.Sprintf("t%02d", i), Queue: q, Kind: "k", IdempotencyKey: fmt.Sprint("key", i)})
		}
		b.kill("a", "db timeout")
		b.kill("b", "bad input")
		// One dead letter of queue a conflicts: a live task holds its key.
		b.enqueue(backstop.EnqueueParams{ID: "holder", Queue: "c", Kind: "k", IdempotencyKey: "key1"})
		var reports []backstop.RedriveProgress
		res, err := b.c.Redrive(b.ctx, backstop.RedriveParams{Filter: backstop.ListParams{Queue: "a", ErrorContains: "timeout"},
			BatchSize: 7, Actor: "ops"}, func(p backstop.RedriveProgress) { reports = append(reports, p) })
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "replayed", res.Replayed, 19)
		eq(t, "failed", res.Failed, 1)
		eq(t, "done", res.Done, true)
		eq(t, "total", reports[0].Total, 20)
		if len(reports) < 4 {
			t.Fatalf("progress reported %d times", len(reports))
		}
		for i := range 30 {
			task := b.get(fmt.Sprintf("t%02d", i))
			want := backstop.StatePending
			if i%3 == 0 || i == 1 {
				want = backstop.StateDead
			}
			eq(t, "state of "+task.ID, task.State, want)
		}
		eq(t, "events", b.events("t02"), []string{"dlq.replayed/ops"})
		eq(t, "conflict event", b.events("t01"), []string{"dlq.replay_failed/ops"})
		// Running it again finds nothing new.
		res, err = b.c.Redrive(b.ctx, backstop.RedriveParams{Filter: backstop.ListParams{Queue: "a", ErrorContains: "timeout"}}, nil)
		if err != nil || res.Replayed != 0 || res.Resumed {
			t.Fatalf("second run: %+v %v", res, err)
		}

		// Rate: 20 at 50/s take at least ~0.3 s.
		start := time.Now()
		res, err = b.c.Redrive(b.ctx, backstop.RedriveParams{Filter: backstop.ListParams{Queue: "b"}, Rate: 50}, nil)
		if err != nil || res.Replayed != 10 {
			t.Fatalf("rated: %+v %v", res, err)
		}
		if el := time.Since(start); el < 80*time.Millisecond {
			t.Fatalf("10 at 50/s took %s", el)
		}
	})

	t.Run("RedriveResume", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		for i := range 50 {
			b.enqueue(backstop.EnqueueParams{ID: fmt.Sprintf("t%02d", i), Queue: "r", Kind: "k"})
		}
		b.kill("r", "x")
		ctx, cancel := context.WithCancel(b.ctx)
		res, err := b.c.Redrive(ctx, backstop.RedriveParams{Filter: backstop.ListParams{Queue: "r"}, BatchSize: 10},
			func(p backstop.RedriveProgress) {
				if p.Replayed >= 20 {
					cancel()
				}
			})
		if !errors.Is(err, backstop.ErrInterrupted) {
			t.Fatalf("interrupted: %+v %v", res, err)
		}
		eq(t, "replayed before the interruption", res.Replayed, 20)
		// A redriven task dies again before the re-run: it must not be redriven twice.
		b.clock.Advance(time.Second)
		b.kill("r", "died again")
		eq(t, "t00 dead again", b.get("t00").State, backstop.StateDead)
		res, err = b.c.Redrive(b.ctx, backstop.RedriveParams{Filter: backstop.ListParams{Queue: "r"}, BatchSize: 10}, nil)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "resumed", res.Resumed, true)
		eq(t, "replayed in all", res.Replayed, 50)
		for i := range 50 {
			task := b.get(fmt.Sprintf("t%02d", i))
			eq(t, "replay_count of "+task.ID, task.ReplayCount, 1)
		}
		eq(t, "t00 stays dead", b.get("t00").State, backstop.StateDead)
	})

	t.Run("RedrivePatched", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		for i := range 6 {
			payload := `{"v":1}`
			if i == 3 {
				payload = `{"v":{"deep":1}}` // the patch cannot apply here... it can: it replaces
			}
			if i == 4 {
				payload = `{"s":"scalar"}`
			}
			b.enqueue(backstop.EnqueueParams{ID: fmt.Sprintf("p%d", i), Queue: "p", Kind: "k", Payload: json.RawMessage(payload)})
		}
		b.kill("p", "x")
		op, _ := backstop.ParsePatch("s.x=2")
		res, err := b.c.Redrive(b.ctx, backstop.RedriveParams{Filter: backstop.ListParams{Queue: "p"}, Patch: []backstop.PatchOp{op}, BatchSize: 4}, nil)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "replayed", res.Replayed, 5)
		eq(t, "failed (path through a scalar)", res.Failed, 1)
		eq(t, "patched", string(b.get("p0").Payload), `{"s":{"x":2},"v":1}`)
		eq(t, "refused stays", b.get("p4").State, backstop.StateDead)
	})
}

// BenchRedrive measures a bulk redrive of b.N dead letters (unthrottled,
// no patch) on s: the dead letters are made first, only the redrive is
// timed. BACKSTOP_BENCH_BATCH (default 500) sets the batch size. Memory stays flat: the redrive streams in batches.
func BenchRedrive(b *testing.B, s store.Store) {
	ctx := context.Background()
	c, err := backstop.NewClient(s, &backstop.Config{Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	queue := fmt.Sprintf("redrive-%d", time.Now().UnixNano())
	now := time.Now().UTC().Truncate(time.Microsecond)
	n := b.N
	for start := 0; start < n; start += 5000 {
		chunk := make([]*bt.Task, 0, 5000)
		for i := start; i < min(start+5000, n); i++ {
			chunk = append(chunk, &bt.Task{ID: fmt.Sprintf("%s-%09d", queue, i), Queue: queue, Kind: "noop", State: bt.StatePending,
				MaxAttempts: 1, Payload: json.RawMessage(`{"n":1}`), RunAt: now, CreatedAt: now, UpdatedAt: now})
		}
		if _, err := s.Enqueue(ctx, chunk, store.EnqueueOpts{}); err != nil {
			b.Fatal(err)
		}
		got, err := s.Claim(ctx, store.ClaimParams{Queue: queue, WorkerID: "bench", Max: len(chunk), Now: now, Lease: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		ss := make([]store.Settlement, len(got))
		for i, t := range got {
			ss[i] = store.Settlement{TaskID: t.ID, ExecutionID: t.ExecutionID, Outcome: bt.OutcomePermanentError, Error: "boom",
				FinishedAt: now, State: bt.StateDead, DeadReason: bt.ReasonPermanentError}
		}
		if _, err := s.Settle(ctx, ss); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	res, err := c.Redrive(ctx, backstop.RedriveParams{Filter: backstop.ListParams{Queue: queue}, Actor: "bench",
		BatchSize: envInt("BACKSTOP_BENCH_BATCH", 500)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	if res.Replayed != n {
		b.Fatalf("redrove %d of %d", res.Replayed, n)
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "dead_letters/s")
}
