package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/remote"
	"github.com/backstophq/backstop/internal/testclock"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlitestore"
)

// TestSettleSeam: every path of the engine that settles attempts goes
// through Engine.Settle, the one place a workflow step is
// advanced, and a handler's SetResult travels in the success settlement.
// The store is a REAL SQLite file wrapped by testdb.SettleRecorder, which
// records the batches that reach it (drivers ignore Settlement.Result, so
// the seam is where a result can be seen); the test fails if any batch
// reached the store without passing Engine.Settle.
func TestSettleSeam(t *testing.T) {
	var rec *testdb.SettleRecorder
	h, clk := newSeamHarness(t, func(s store.Store) store.Store { rec = testdb.RecordSettlements(s); return rec })
	var mu sync.Mutex
	var seen [][]store.Settlement
	h.c.Engine().SettleSeen = func(ss []store.Settlement) {
		mu.Lock()
		seen = append(seen, slices.Clone(ss))
		mu.Unlock()
	}
	ctx := context.Background()

	// 1. An in-process worker: a success with a result, a success without
	// one, and (on Stop, grace run out) a release.
	block := make(chan struct{})
	w, err := backstop.NewWorker(h.c, &backstop.WorkerConfig{Queues: map[string]int{"w": 4}, PollInterval: 20 * time.Millisecond,
		MaintenanceInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("res", backstop.HandlerFunc(func(ctx context.Context, tk *bt.Task) error {
		return backstop.SetResult(ctx, map[string]any{"id": tk.ID, "n": 7})
	}))
	w.Handle("raw", backstop.HandlerFunc(func(ctx context.Context, _ *bt.Task) error {
		return backstop.SetResult(ctx, json.RawMessage(` [1, "two"] `))
	}))
	w.Handle("none", backstop.HandlerFunc(func(context.Context, *bt.Task) error { return nil }))
	w.Handle("fails", backstop.HandlerFunc(func(ctx context.Context, _ *bt.Task) error {
		if err := backstop.SetResult(ctx, "kept only on success"); err != nil {
			return err
		}
		return backstop.Permanent(errors.New("no"))
	}))
	w.Handle("block", backstop.HandlerFunc(func(ctx context.Context, _ *bt.Task) error {
		close(block)
		<-ctx.Done()
		return ctx.Err()
	}))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res := h.enqueue(backstop.EnqueueParams{Queue: "w", Kind: "res"})
	raw := h.enqueue(backstop.EnqueueParams{Queue: "w", Kind: "raw"})
	none := h.enqueue(backstop.EnqueueParams{Queue: "w", Kind: "none"})
	fails := h.enqueue(backstop.EnqueueParams{Queue: "w", Kind: "fails"})
	for _, id := range []string{res, raw, none} {
		h.waitFor(id, bt.StateSucceeded)
	}
	h.waitFor(fails, bt.StateDead)
	released := h.enqueue(backstop.EnqueueParams{Queue: "w", Kind: "block"})
	<-block
	stopCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if err := w.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	cancel()

	// 2. The remote protocol: complete (with a result), the batch
	// complete (with one), fail, release.
	for range 4 {
		h.enqueue(backstop.EnqueueParams{Queue: "q", Kind: "k"})
	}
	ls := h.claimRemote(4)
	if _, err := remote.New(h.c.Engine()).Complete(ctx, ls[0].ID, ls[0].LeaseToken, nil, json.RawMessage(`{"remote":true}`)); err != nil {
		t.Fatal(err)
	}
	outs, err := remote.New(h.c.Engine()).CompleteMany(ctx, []remote.Completion{{TaskID: ls[1].ID, LeaseToken: ls[1].LeaseToken, Result: json.RawMessage(`"batched"`)}})
	if err != nil || outs[0].Err != nil {
		t.Fatal(err, outs)
	}
	if _, err := remote.New(h.c.Engine()).Fail(ctx, remote.Failure{TaskID: ls[2].ID, LeaseToken: ls[2].LeaseToken, Outcome: bt.OutcomePermanentError}); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.New(h.c.Engine()).Release(ctx, ls[3].ID, ls[3].LeaseToken, nil); err != nil {
		t.Fatal(err)
	}

	// 3. Maintenance: an expired lease and a passed deadline.
	expired := h.enqueue(backstop.EnqueueParams{Queue: "q", Kind: "k", MaxAttempts: 1})
	h.claimRemote(2) // the released task and this one
	late := h.enqueue(backstop.EnqueueParams{Queue: "late", Kind: "k", Deadline: clk.Now().Add(time.Minute)})
	clk.Advance(time.Hour)
	if err := backstop.Maintain(ctx, h.c); err != nil {
		t.Fatal(err)
	}

	// Every batch the store saw came through Engine.Settle.
	mu.Lock()
	defer mu.Unlock()
	got := rec.Batches()
	if len(got) != len(seen) {
		t.Fatalf("the store settled %d batches, Engine.Settle saw %d: a path bypasses it", len(got), len(seen))
	}
	for i := range got {
		if len(got[i]) != len(seen[i]) {
			t.Fatalf("batch %d: the store got %d settlements, Engine.Settle %d", i, len(got[i]), len(seen[i]))
		}
		for j := range got[i] {
			if got[i][j].TaskID != seen[i][j].TaskID || got[i][j].ExecutionID != seen[i][j].ExecutionID {
				t.Fatalf("batch %d item %d: the store got %s, Engine.Settle %s", i, j, got[i][j].TaskID, seen[i][j].TaskID)
			}
		}
	}
	// Each path was seen (so the check above covered it).
	want := map[string]bt.Outcome{res: bt.OutcomeSucceeded, raw: bt.OutcomeSucceeded, none: bt.OutcomeSucceeded,
		fails: bt.OutcomePermanentError, released: bt.OutcomeReleased, ls[0].ID: bt.OutcomeSucceeded,
		ls[1].ID: bt.OutcomeSucceeded, ls[2].ID: bt.OutcomePermanentError, ls[3].ID: bt.OutcomeReleased,
		expired: bt.OutcomeLeaseExpired, late: ""}
	for id, o := range want {
		ss := rec.Of(id)
		if len(ss) == 0 || ss[0].Outcome != o {
			t.Errorf("task %s: settlements %+v, want first outcome %q", id, ss, o)
		}
	}
	// The results.
	wantResult := map[string]string{res: `{"id":"` + res + `","n":7}`, raw: `[1, "two"]`, none: "", fails: "",
		ls[0].ID: `{"remote":true}`, ls[1].ID: `"batched"`, ls[2].ID: "", ls[3].ID: ""}
	for id, r := range wantResult {
		if ss := rec.Of(id); len(ss) == 0 || string(ss[0].Result) != r {
			t.Errorf("task %s: result %q, want %q", id, firstResult(ss), r)
		}
	}
}

func firstResult(ss []store.Settlement) string {
	if len(ss) == 0 {
		return "(not settled)"
	}
	return string(ss[0].Result)
}

// seamHarness is a client on a real SQLite file (wrapped) with a clock
// moved by hand.
type seamHarness struct {
	t *testing.T
	c *backstop.Client
}

func newSeamHarness(t *testing.T, wrap func(store.Store) store.Store) (*seamHarness, *testclock.Clock) {
	t.Helper()
	s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "backstop.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk := testclock.At(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	c, err := backstop.NewClient(wrap(s), &backstop.Config{Clock: clk, Logger: slog.New(slog.DiscardHandler),
		Retry: &bt.RetryPolicy{Schedule: []bt.Duration{0}}})
	if err != nil {
		t.Fatal(err)
	}
	return &seamHarness{t: t, c: c}, clk
}

func (h *seamHarness) enqueue(p backstop.EnqueueParams) string {
	h.t.Helper()
	r, err := h.c.Enqueue(context.Background(), p)
	if err != nil {
		h.t.Fatal(err)
	}
	return r.Task.ID
}

func (h *seamHarness) waitFor(id string, state bt.State) {
	h.t.Helper()
	testwait.For(h.t, "task "+id+" to be "+string(state), func() bool {
		tk, err := h.c.Get(context.Background(), id)
		if err != nil {
			h.t.Fatal(err)
		}
		return tk.State == state
	})
}

func (h *seamHarness) claimRemote(n int) []remote.Lease {
	h.t.Helper()
	ls, err := remote.New(h.c.Engine()).Claim(context.Background(), remote.Claim{Queues: []string{"q"}, WorkerID: "remote-1", Max: n, Lease: 10 * time.Second})
	if err != nil || len(ls) != n {
		h.t.Fatalf("claimed %d tasks (%v), want %d", len(ls), err, n)
	}
	return ls
}
