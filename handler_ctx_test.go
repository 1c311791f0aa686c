package backstop

import (
	"context"
	"errors"
	"testing"
)

type ctxTestKey struct{}

// TestAttemptCtx: the attempt's context answers attemptKey with its
// attempt, passes other keys, cancellation and causes through, and a
// context derived from it is canceled with it.
func TestAttemptCtx(t *testing.T) {
	base, cancel := context.WithCancelCause(context.WithValue(context.Background(), ctxTestKey{}, "v"))
	a := &attempt{task: &Task{ID: "t1"}}
	a.ctx = attemptCtx{Context: base, a: a}
	ctx := context.Context(&a.ctx)
	if tk, ok := TaskFromContext(ctx); !ok || tk.ID != "t1" {
		t.Fatalf("TaskFromContext = %v, %v", tk, ok)
	}
	if v := ctx.Value(ctxTestKey{}); v != "v" {
		t.Errorf("other key: %v", v)
	}
	child, stop := context.WithCancel(ctx)
	defer stop()
	if _, ok := TaskFromContext(child); !ok {
		t.Error("a derived context lost the attempt")
	}
	boom := errors.New("boom")
	cancel(boom)
	<-child.Done()
	if ctx.Err() == nil || !errors.Is(context.Cause(ctx), boom) || !errors.Is(context.Cause(child), boom) {
		t.Errorf("err %v, cause %v, child's cause %v", ctx.Err(), context.Cause(ctx), context.Cause(child))
	}
}
