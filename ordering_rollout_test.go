package backstop

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store/sqlitestore"
)

// TestOrderingRollout: a queue rolling ordering out orders the tasks of
// the organisations named (buffered, admitted per key in sequence order)
// and a stable share of the other keys; the rest run
// unordered (pending at once, key and sequence dropped, marked
// ordering_rollout=out, never dropped as stale), and both are counted.
func TestOrderingRollout(t *testing.T) {
	t.Parallel()
	rollout := &OrderingRollout{Attribute: "org", Values: []string{"acme"}, Percent: 30}
	cfg := func() *Config {
		return &Config{Queues: map[string]QueueConfig{"up": {Ordering: OrderingConfig{Enabled: true, EnabledFor: rollout}}}}
	}
	forEachStoreClient(t, cfg, func(t *testing.T, c *Client) {
		ctx := context.Background()
		enq := func(id, org, key string, seq int64) *Task {
			t.Helper()
			r, err := c.Enqueue(ctx, EnqueueParams{ID: id, Queue: "up", Kind: "k", OrderingKey: key, Sequence: seq,
				Attributes: map[string]string{"org": org}})
			if err != nil {
				t.Fatal(err)
			}
			return r.Task
		}
		// acme: ordered whatever its key.
		if tk := enq("acme-2", "acme", "acme-site", 2); tk.State != StateBuffered || tk.Attributes[OrderingRolloutAttribute] != "" {
			t.Fatalf("acme's task: %s %v, want buffered", tk.State, tk.Attributes)
		}
		// Other organisations: 30 % of keys, the same key always alike.
		ordered := 0
		for i := range 200 {
			key := fmt.Sprintf("site-%d", i)
			tk := enq(fmt.Sprintf("g-%d", i), "globex", key, 1)
			in := rollout.Selects(key, nil)
			switch {
			case in && (tk.State != StateBuffered || tk.Attributes[OrderingRolloutAttribute] != ""):
				t.Fatalf("%s selected: %s %v", key, tk.State, tk.Attributes)
			case !in && (tk.State != StatePending || tk.OrderingKey != "" || tk.Sequence != 0 || tk.Attributes[OrderingRolloutAttribute] != "out"):
				t.Fatalf("%s left out: %s key %q seq %d attrs %v", key, tk.State, tk.OrderingKey, tk.Sequence, tk.Attributes)
			}
			if in {
				ordered++
			}
		}
		if ordered < 40 || ordered > 80 {
			t.Errorf("%d of 200 keys ordered at 30 %%", ordered)
		}
		st := c.QueueOrderingStats("up")
		if got, want := st.RolloutOrdered.Load(), int64(ordered+1); got != want {
			t.Errorf("rollout_ordered %d, want %d", got, want)
		}
		if got, want := st.RolloutUnordered.Load(), int64(200-ordered); got != want {
			t.Errorf("rollout_unordered %d, want %d", got, want)
		}

		// Left out, a key's tasks all run, whatever their sequences; an
		// ordered key's run in sequence order.
		var out string
		for i := range 200 {
			if k := fmt.Sprintf("site-%d", i); !rollout.Selects(k, nil) {
				out = k
				break
			}
		}
		enq("out-9", "globex", out, 9)
		enq("out-3", "globex", out, 3)
		enq("acme-1", "acme", "acme-site", 1) // enqueued after acme-2, runs before it
		var mu sync.Mutex
		ran := map[string]bool{}
		order := map[string]int{}
		w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"up": 4}, PollInterval: 10 * time.Millisecond, MaintenanceInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("k", HandlerFunc(func(_ context.Context, tk *Task) error {
			mu.Lock()
			ran[tk.ID] = true
			order[tk.ID] = len(order)
			mu.Unlock()
			return nil
		}))
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop(context.Background()) })
		testwait.For(t, "the unordered tasks and acme-2 to run", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return ran["out-9"] && ran["out-3"] && ran["acme-1"] && ran["acme-2"]
		})
		mu.Lock()
		defer mu.Unlock()
		if order["acme-1"] > order["acme-2"] {
			t.Errorf("acme's key ran out of sequence order: %v", order)
		}
	})
}

// An OrderingRollout that selects nothing, or a percent outside 0–100, is
// refused by NewClient, naming the queue.
func TestOrderingRolloutRefused(t *testing.T) {
	s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, r := range []*OrderingRollout{{}, {Percent: 101}, {Attribute: "org"}, {Values: []string{"a"}}} {
		_, err := NewClient(s, &Config{Queues: map[string]QueueConfig{"up": {Ordering: OrderingConfig{Enabled: true, EnabledFor: r}}}})
		if err == nil {
			t.Errorf("%+v accepted", *r)
		}
	}
}
