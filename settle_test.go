package backstop

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/remote"
)

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
