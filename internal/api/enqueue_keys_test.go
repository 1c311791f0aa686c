package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
)

// enqueueRaw posts one task object and decodes the answer.
func (b *bundle) enqueueRaw(t *testing.T, body string) (int, api.EnqueueResponse) {
	t.Helper()
	st, raw := b.raw(t, api.RoleOperator, "POST", "/v1/tasks", "application/json", body)
	var r api.EnqueueResponse
	if st < 300 {
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
	}
	return st, r
}

func (b *bundle) taskCount(t *testing.T) int {
	t.Helper()
	ts, err := b.lib.List(context.Background(), backstop.ListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(ts)
}

// TestEnqueueUniqueFor: unique_for gives idempotency_key a window; within
// it the first task comes back (200, duplicate), and a window that is not
// a positive duration, or has no key, is 400 with nothing written.
func TestEnqueueUniqueFor(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		for _, body := range []string{
			`{"queue":"q","kind":"k","idempotency_key":"d","unique_for":"-1s"}`,
			`{"queue":"q","kind":"k","idempotency_key":"d","unique_for":"0s"}`,
			`{"queue":"q","kind":"k","idempotency_key":"d","unique_for":0}`,
			`{"queue":"q","kind":"k","idempotency_key":"d","unique_for":"soon"}`,
			`{"queue":"q","kind":"k","unique_for":"1h"}`,
		} {
			if st, raw := b.raw(t, api.RoleOperator, "POST", "/v1/tasks", "application/json", body); st != http.StatusBadRequest {
				t.Errorf("%s: %d %s, want 400", body, st, raw)
			}
		}
		if n := b.taskCount(t); n != 0 {
			t.Fatalf("bad windows wrote %d tasks", n)
		}
		st, first := b.enqueueRaw(t, `{"queue":"q","kind":"k","idempotency_key":"d","unique_for":"1h"}`)
		if st != http.StatusCreated || first.Task.UniqueUntil == nil || !first.Task.UniqueUntil.Equal(first.Task.CreatedAt.Add(3600e9)) {
			t.Fatalf("first: %d, unique_until %v (created %v)", st, first.Task.UniqueUntil, first.Task.CreatedAt)
		}
		b.clock.Advance(59 * 60e9)
		st, again := b.enqueueRaw(t, `{"queue":"q","kind":"k","idempotency_key":"d","unique_for":"1h"}`)
		if st != http.StatusOK || !again.Duplicate || again.Task.ID != first.Task.ID {
			t.Fatalf("within the window: %d duplicate %v task %s, want 200, the first task %s", st, again.Duplicate, again.Task.ID, first.Task.ID)
		}
		b.clock.Advance(2 * 60e9)
		st, later := b.enqueueRaw(t, `{"queue":"q","kind":"k","idempotency_key":"d","unique_for":"1h"}`)
		if st != http.StatusCreated || later.Duplicate || later.Task.ID == first.Task.ID {
			t.Fatalf("past the window: %d duplicate %v task %s, want a new task", st, later.Duplicate, later.Task.ID)
		}
	})
}

// TestEnqueueDebounce: a task object's debounce replaces the waiting task
// of its key and delays it; bad values are 400 with nothing written.
func TestEnqueueDebounce(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		for _, body := range []string{
			`{"queue":"q","kind":"k","debounce":{}}`,
			`{"queue":"q","kind":"k","debounce":{"key":"d"}}`,
			`{"queue":"q","kind":"k","debounce":{"key":"d","for":"-1s"}}`,
			`{"queue":"q","kind":"k","debounce":{"key":"d","for":"soon"}}`,
			`{"queue":"q","kind":"k","debounce":{"key":"d","for":"1m","max_wait":"1s"}}`,
			`{"queue":"q","kind":"k","debounce":{"key":"d","for":"1s","wait":"1s"}}`,
			`{"queue":"q","kind":"k","debounce":{"key":"d","for":"1s"},"delay":"1s"}`,
			`{"queue":"q","kind":"k","debounce":"d"}`,
		} {
			if st, raw := b.raw(t, api.RoleOperator, "POST", "/v1/tasks", "application/json", body); st != http.StatusBadRequest {
				t.Errorf("%s: %d %s, want 400", body, st, raw)
			}
		}
		if n := b.taskCount(t); n != 0 {
			t.Fatalf("bad debounces wrote %d tasks", n)
		}
		const body = `{"queue":"q","kind":"k","payload":{"v":%d},"debounce":{"key":"d","for":"10s","max_wait":"15s"}}`
		st, first := b.enqueueRaw(t, fmt.Sprintf(body, 1))
		if st != http.StatusCreated || first.Task.State != "scheduled" || !first.Task.RunAt.Equal(first.Task.CreatedAt.Add(10e9)) {
			t.Fatalf("first: %d state %s run_at %v", st, first.Task.State, first.Task.RunAt)
		}
		b.clock.Advance(8e9)
		st, again := b.enqueueRaw(t, fmt.Sprintf(body, 2))
		if st != http.StatusOK || !again.Merged || again.Task.ID != first.Task.ID || string(again.Task.Payload) != `{"v":2}` ||
			!again.Task.RunAt.Equal(first.Task.CreatedAt.Add(15e9)) {
			t.Fatalf("second: %d merged %v task %s payload %s run_at %v; want the first task, capped at created+15s",
				st, again.Merged, again.Task.ID, again.Task.Payload, again.Task.RunAt)
		}
	})
}
