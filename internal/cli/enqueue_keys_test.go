package cli

import (
	"strings"
	"testing"
	"time"
)

// TestEnqueueUniqueFor: --unique-for gives --idempotency-key a window;
// within it the first task comes back (a duplicate), and a window that is
// not a positive duration, or has no key, exits 2 with nothing written.
func TestEnqueueUniqueFor(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		for _, c := range []struct {
			value, want string
		}{{"-1s", "--unique-for"}, {"0", "--unique-for"}, {"soon", "unique-for"}} {
			e.fails(ExitUsage, c.want, "enqueue", "--queue", "q", "--kind", "k", "--idempotency-key", "d", "--unique-for", c.value)
		}
		e.fails(ExitUsage, "unique_for", "enqueue", "--queue", "q", "--kind", "k", "--unique-for", "1h")
		if ids := e.listIDs(); len(ids) != 0 {
			t.Fatalf("bad windows wrote %v", ids)
		}
		var first, again taskOut
		e.json(&first, "enqueue", "--queue", "q", "--kind", "k", "--idempotency-key", "d", "--unique-for", "1h")
		if first.UniqueUntil == nil || !first.UniqueUntil.Equal(first.CreatedAt.Add(time.Hour)) {
			t.Fatalf("unique_until %v, want created_at %v + 1h", first.UniqueUntil, first.CreatedAt)
		}
		r := e.run("", "enqueue", "--queue", "q", "--kind", "k", "--idempotency-key", "d", "--unique-for", "1h")
		if r.code != 0 || strings.TrimSpace(r.stdout) != first.ID || !strings.Contains(r.stderr, "duplicate") {
			t.Fatalf("second enqueue: exit %d, id %q (first %q), stderr %q", r.code, r.stdout, first.ID, r.stderr)
		}
		e.json(&again, "tasks", "show", first.ID)
		if again.UniqueUntil == nil || !again.UniqueUntil.Equal(*first.UniqueUntil) {
			t.Errorf("tasks show: unique_until %v, want %v", again.UniqueUntil, first.UniqueUntil)
		}
	})
}
