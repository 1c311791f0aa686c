package backstop

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/remote"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
)

// TestSettleSeam: every path of the engine that settles attempts goes
// through Client.settle (settle.go), the one place a workflow step is
// advanced, and a handler's SetResult travels in the success settlement.
// The store is a REAL SQLite file wrapped by testdb.SettleRecorder, which
// records the batches that reach it (drivers ignore Settlement.Result, so
// the seam is where a result can be seen); the test fails if any batch
// reached the store without passing Client.settle.
func TestSettleSeam(t *testing.T) {
	var rec *testdb.SettleRecorder
	h, clk := newClockHarnessOn(t, func(s store.Store) store.Store { rec = testdb.RecordSettlements(s); return rec })
	var mu sync.Mutex
	var seen [][]store.Settlement
	h.c.e.SettleSeen = func(ss []store.Settlement) {
		mu.Lock()
		seen = append(seen, slices.Clone(ss))
		mu.Unlock()
	}
	ctx := context.Background()

	// 1. An in-process worker: a success with a result, a success without
	// one, and (on Stop, grace run out) a release.
	block := make(chan struct{})
	w, err := NewWorker(h.c, &WorkerConfig{Queues: map[string]int{"w": 4}, PollInterval: 20 * time.Millisecond,
		MaintenanceInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("res", HandlerFunc(func(ctx context.Context, tk *Task) error {
		return SetResult(ctx, map[string]any{"id": tk.ID, "n": 7})
	}))
	w.Handle("raw", HandlerFunc(func(ctx context.Context, _ *Task) error {
		return SetResult(ctx, json.RawMessage(` [1, "two"] `))
	}))
	w.Handle("none", HandlerFunc(func(context.Context, *Task) error { return nil }))
	w.Handle("fails", HandlerFunc(func(ctx context.Context, _ *Task) error {
		if err := SetResult(ctx, "kept only on success"); err != nil {
			return err
		}
		return Permanent(errors.New("no"))
	}))
	w.Handle("block", HandlerFunc(func(ctx context.Context, _ *Task) error {
		close(block)
		<-ctx.Done()
		return ctx.Err()
	}))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res := h.enqueue(EnqueueParams{Queue: "w", Kind: "res"})
	raw := h.enqueue(EnqueueParams{Queue: "w", Kind: "raw"})
	none := h.enqueue(EnqueueParams{Queue: "w", Kind: "none"})
	fails := h.enqueue(EnqueueParams{Queue: "w", Kind: "fails"})
	for _, id := range []string{res, raw, none} {
		h.waitFor(id, StateSucceeded)
	}
	h.waitFor(fails, StateDead)
	released := h.enqueue(EnqueueParams{Queue: "w", Kind: "block"})
	<-block
	stopCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if err := w.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	cancel()

	// 2. The remote protocol: complete (with a result), the batch
	// complete (with one), fail, release.
	for range 4 {
		h.enqueue(EnqueueParams{Queue: "q", Kind: "k"})
	}
	ls := h.claimRemote(4)
	if _, err := remote.New(h.c.e).Complete(ctx, ls[0].ID, ls[0].LeaseToken, nil, json.RawMessage(`{"remote":true}`)); err != nil {
		t.Fatal(err)
	}
	outs, err := remote.New(h.c.e).CompleteMany(ctx, []remote.Completion{{TaskID: ls[1].ID, LeaseToken: ls[1].LeaseToken, Result: json.RawMessage(`"batched"`)}})
	if err != nil || outs[0].Err != nil {
		t.Fatal(err, outs)
	}
	if _, err := remote.New(h.c.e).Fail(ctx, remote.Failure{TaskID: ls[2].ID, LeaseToken: ls[2].LeaseToken, Outcome: bt.OutcomePermanentError}); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.New(h.c.e).Release(ctx, ls[3].ID, ls[3].LeaseToken, nil); err != nil {
		t.Fatal(err)
	}

	// 3. Maintenance: an expired lease and a passed deadline.
	expired := h.enqueue(EnqueueParams{Queue: "q", Kind: "k", MaxAttempts: 1})
	h.claimRemote(2) // the released task and this one
	late := h.enqueue(EnqueueParams{Queue: "late", Kind: "k", Deadline: clk.Now().Add(time.Minute)})
	clk.Advance(time.Hour)
	if err := Maintain(ctx, h.c); err != nil {
		t.Fatal(err)
	}

	// Every batch the store saw came through Client.settle.
	mu.Lock()
	defer mu.Unlock()
	got := rec.Batches()
	if len(got) != len(seen) {
		t.Fatalf("the store settled %d batches, Client.settle saw %d: a path bypasses it", len(got), len(seen))
	}
	for i := range got {
		if len(got[i]) != len(seen[i]) {
			t.Fatalf("batch %d: the store got %d settlements, Client.settle %d", i, len(got[i]), len(seen[i]))
		}
		for j := range got[i] {
			if got[i][j].TaskID != seen[i][j].TaskID || got[i][j].ExecutionID != seen[i][j].ExecutionID {
				t.Fatalf("batch %d item %d: the store got %s, Client.settle %s", i, j, got[i][j].TaskID, seen[i][j].TaskID)
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

// TestSetResultRefuses: outside a handler SetResult says so; a result that
// is not JSON, not UTF-8, over 1 MiB or not storable in jsonb is refused
// with a permanent error naming "result", which the attempt keeps (it fails
// with it) until a later call records a result.
func TestSetResultRefuses(t *testing.T) {
	if err := SetResult(context.Background(), 1); !errors.Is(err, ErrNotInHandler) {
		t.Fatalf("outside a handler: %v, want ErrNotInHandler", err)
	}
	a := &attempt{}
	ctx := &attemptCtx{Context: context.Background(), a: a}
	if err := SetResult(ctx, json.RawMessage(`{"ok":1}`)); err != nil {
		t.Fatal(err)
	}
	big := `"` + strings.Repeat("x", MaxResultBytes) + `"`
	for name, v := range map[string]any{
		"not JSON":       json.RawMessage(`{"a":`),
		"not UTF-8":      json.RawMessage("\"\xff\""),
		"too large":      json.RawMessage(big),
		"too large2":     strings.Repeat("x", MaxResultBytes),
		"no marshal":     make(chan int),
		"lone surrogate": json.RawMessage(`{"a":"\udc00"}`),
		"NUL":            map[string]string{"a": "\x00"},
		"number":         json.RawMessage(`[1e200000]`),
	} {
		err := SetResult(ctx, v)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if !IsPermanent(err) {
			t.Errorf("%s: %v is not permanent", name, err)
		}
		if got, kept := a.resultOf(); got != nil || !errors.Is(kept, err) {
			t.Errorf("%s: the attempt holds %q and %v, want no result and the refusal", name, got, kept)
		}
		if name != "no marshal" {
			var ve *ValidationError
			if !errors.As(err, &ve) || ve.Field != "result" || !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: %v, want a ValidationError on field result", name, err)
			}
		}
	}
	// A later call replaces the refusal.
	if err := SetResult(ctx, json.RawMessage(`{"ok":1}`)); err != nil {
		t.Fatal(err)
	}
	if got, kept := a.resultOf(); string(got) != `{"ok":1}` || kept != nil {
		t.Errorf("after a refusal and a good call the result is %q (%v), want the good one", got, kept)
	}
	// null is no result; exactly 1 MiB is allowed.
	if err := SetResult(ctx, nil); err != nil {
		t.Errorf("SetResult(nil): %v", err)
	} else if got, _ := a.resultOf(); got != nil {
		t.Errorf("SetResult(nil): result %q; want no result", got)
	}
	exact := `"` + strings.Repeat("x", MaxResultBytes-2) + `"`
	if err := SetResult(ctx, json.RawMessage(exact)); err != nil {
		t.Errorf("1 MiB exactly: %v", err)
	} else if got, _ := a.resultOf(); len(got) != MaxResultBytes {
		t.Errorf("1 MiB exactly: %d bytes kept", len(got))
	}
}

// TestCompleteRefusesBadResult: a remote completion with a result that is
// not JSON or too large is refused (field "result") and settles nothing.
func TestCompleteRefusesBadResult(t *testing.T) {
	h, _ := newClockHarness(t)
	ctx := context.Background()
	id := h.enqueue(EnqueueParams{Queue: "q", Kind: "k"})
	l := h.claimRemote(1)[0]
	for _, r := range []json.RawMessage{json.RawMessage(`{`), json.RawMessage(`"` + strings.Repeat("y", MaxResultBytes) + `"`)} {
		_, err := remote.New(h.c.e).Complete(ctx, id, l.LeaseToken, nil, r)
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != "result" {
			t.Errorf("complete with a bad result: %v, want a ValidationError on result", err)
		}
		outs, err := remote.New(h.c.e).CompleteMany(ctx, []remote.Completion{{TaskID: id, LeaseToken: l.LeaseToken, Result: r}})
		if err != nil || !errors.As(outs[0].Err, &ve) || ve.Field != "result" {
			t.Errorf("complete many with a bad result: %v %v", outs, err)
		}
	}
	if tk, _ := h.c.Get(ctx, id); tk.State != StateRunning {
		t.Errorf("task %s after refused completions, want running", tk.State)
	}
}
