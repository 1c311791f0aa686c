package pgstore_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
)

// When the ordering state cannot be read or written, ordered tasks are
// handled normally, and that is counted.
func TestOrderingFallback(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	c, err := backstop.NewClient(b.store, &backstop.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Queues: map[string]backstop.QueueConfig{"oq": {Ordering: backstop.OrderingConfig{Enabled: true, Step: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range []int64{1, 3} {
		if _, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "oq", Kind: "r", OrderingKey: "k", Sequence: seq}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.store.Pool().Exec(ctx, `DROP TABLE backstop_ordering_keys`); err != nil {
		t.Fatal(err)
	}
	if err := c.OrderQueue(ctx, "oq"); err != nil {
		t.Fatalf("order with unusable state: %v (want a fallback)", err)
	}
	if got := c.OrderingStats().Fallback.Load(); got != 2 {
		t.Fatalf("fallback counter: got %d, want 2", got)
	}
	ts, err := b.store.Claim(ctx, store.ClaimParams{Queue: "oq", WorkerID: "w", Max: 10, Now: time.Now(), Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 {
		t.Fatalf("claimed %d tasks after the fallback, want 2", len(ts))
	}
}
