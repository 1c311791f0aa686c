package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// BenchWhere lists by a payload field on BACKSTOP_BENCH_TASKS tasks
// (default 100,000; one in 1,000 matches), the where evaluated in SQL
// (payload.customer.id == 7) and in Go (payload.customer.id + 0.0 == 7.0, the
// same selection outside the SQL subset); each op is the whole listing
// (limit 10,000: every match), and it reports tasks scanned per second.
func BenchWhere(b *testing.B, s store.Store) {
	ctx := context.Background()
	c, err := backstop.NewClient(s, &backstop.Config{Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	n := envInt("BACKSTOP_BENCH_TASKS", 100_000)
	queue := fmt.Sprintf("where-%d", time.Now().UnixNano())
	now := time.Now().UTC().Truncate(time.Microsecond)
	for start := 0; start < n; start += 5000 {
		chunk := make([]*bt.Task, 0, 5000)
		for i := start; i < min(start+5000, n); i++ {
			p := fmt.Sprintf(`{"customer":{"id":%d,"name":"customer %d"},"order":{"lines":[1,2,3],"total":%d.5}}`, i%1000, i, i)
			chunk = append(chunk, &bt.Task{ID: fmt.Sprintf("%s-%09d", queue, i), Queue: queue, Kind: "noop", State: bt.StatePending,
				MaxAttempts: 1, Payload: json.RawMessage(p), RunAt: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now,
				Attributes: map[string]string{"tenant": "acme"}})
		}
		if _, err := s.Enqueue(ctx, chunk, store.EnqueueOpts{}); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct{ name, where string }{
		{"SQL", `payload.customer.id == 7`},
		{"Go", `payload.customer.id + 0.0 == 7.0`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				ts, err := c.List(ctx, backstop.ListParams{Queue: queue, Where: bc.where, Limit: 10000, WithoutPayload: true})
				if err != nil {
					b.Fatal(err)
				}
				if len(ts) != (n+999-7)/1000 {
					b.Fatalf("%d matches", len(ts))
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tasks_scanned/s")
		})
	}
}
