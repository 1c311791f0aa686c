package backstop

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
)

// TestHandlerFor: a kind's own handler before the default one, middleware
// first-added outermost, registrations after use take effect, and reads
// race with registrations safely (run with -race).
func TestHandlerFor(t *testing.T) {
	w := &Worker{}
	if w.handlerFor("a") != nil {
		t.Fatal("a handler before any registration")
	}
	named := func(name string) Handler {
		return HandlerFunc(func(context.Context, *Task) error { return errors.New(name) })
	}
	run := func(kind string) string {
		h := w.handlerFor(kind)
		if h == nil {
			return "<none>"
		}
		return h.Work(context.Background(), &Task{Kind: kind}).Error()
	}
	w.Handle("a", named("a"))
	if got := run("a"); got != "a" {
		t.Errorf("a ran %q", got)
	}
	if got := run("b"); got != "<none>" {
		t.Errorf("b without a default ran %q", got)
	}
	w.HandleDefault(named("default"))
	if got, got2 := run("a"), run("b"); got != "a" || got2 != "default" {
		t.Errorf("a ran %q, b ran %q; want a, default", got, got2)
	}
	tag := func(s string) Middleware {
		return func(next Handler) Handler {
			return HandlerFunc(func(ctx context.Context, tk *Task) error {
				return errors.New(s + "(" + next.Work(ctx, tk).Error() + ")")
			})
		}
	}
	w.Use(tag("outer"))
	w.Use(tag("inner"))
	if got := run("a"); got != "outer(inner(a))" {
		t.Errorf("middleware: %q, want outer(inner(a))", got)
	}
	w.Handle("a", named("a2"))
	if got := run("a"); got != "outer(inner(a2))" {
		t.Errorf("re-registered: %q", got)
	}

	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for j := range 50 {
				w.Handle(strings.Repeat("k", i+1)+string(rune('a'+j%26)), named("x"))
			}
		}()
		go func() {
			defer wg.Done()
			for range 50 {
				_ = run("a")
			}
		}()
	}
	wg.Wait()
	if got := run("kkkkz"); got != "outer(inner(x))" {
		t.Errorf("concurrent registration lost: %q", got)
	}
}
