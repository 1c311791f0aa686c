package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

// BenchmarkEnqueue measures Store.Enqueue of batches of 1,000 tasks:
// without keys (written by COPY), and each with an idempotency key of its
// own (one look-up of the keys and one INSERT). tasks/s is the figure
// docs/benchmarks.md tracks, beside `backstop bench floor`'s ratio to COPY.
func BenchmarkEnqueue(b *testing.B) {
	for _, c := range []struct {
		name  string
		keyed bool
	}{{"plain", false}, {"idempotency_keys", true}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			s, err := pgstore.Open(ctx, testdb.Postgres(b))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if err := s.Migrate(ctx); err != nil {
				b.Fatal(err)
			}
			const batch = 1000
			var elapsed time.Duration
			for b.Loop() {
				now := time.Now().UTC()
				ts := make([]*bt.Task, batch)
				for i := range ts {
					id := uuid.Must(uuid.NewV7()).String()
					ts[i] = &bt.Task{ID: id, Queue: "bench", Kind: "noop", State: bt.StatePending, MaxAttempts: 25,
						Payload: []byte(`{}`), RunAt: now, CreatedAt: now, UpdatedAt: now}
					if c.keyed {
						ts[i].IdempotencyKey = id
					}
				}
				start := time.Now()
				if _, err := s.Enqueue(ctx, ts, store.EnqueueOpts{InlineLimit: 64 << 10}); err != nil {
					b.Fatal(err)
				}
				elapsed += time.Since(start)
			}
			b.ReportMetric(float64(b.N*batch)/elapsed.Seconds(), "tasks/s")
		})
	}
}
