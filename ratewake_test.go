package backstop

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/testwait"
)

// TestRateLimitedWorkerWakesForTheNextToken: a worker whose claim a rate
// limit cut short claims again when the limit's next token is due, not a
// poll interval later. With a poll of an hour and no other wake-up (the
// tasks were all enqueued before it started), a rate of 20/s with a burst
// of 1 drains 8 tasks; a worker that waited for its poll would run one.
func TestRateLimitedWorkerWakesForTheNextToken(t *testing.T) {
	forEachStoreClient(t, func() *Config { return &Config{} }, func(t *testing.T, c *Client) {
		ctx := context.Background()
		q := "rw" + strings.ReplaceAll(t.Name(), "/", "_")
		if _, err := c.SetLimit(ctx, Limit{Name: "l" + q, Queue: q, Rate: 20, Burst: 1}, "test"); err != nil {
			t.Fatal(err)
		}
		const n = 8
		for range n {
			if _, err := c.Enqueue(ctx, EnqueueParams{Queue: q, Kind: "k"}); err != nil {
				t.Fatal(err)
			}
		}
		w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{q: 4}, PollInterval: time.Hour, MaintenanceInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		var ran atomic.Int32
		w.Handle("k", HandlerFunc(func(context.Context, *Task) error { ran.Add(1); return nil }))
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop(context.Background()) })
		testwait.For(t, "the rate-limited backlog drained", func() bool { return ran.Load() == n })
	})
}
