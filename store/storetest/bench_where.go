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

// BenchDLQByPayload: the dead-letter operations by a payload field on
// BACKSTOP_BENCH_TASKS dead letters (default 100,000, one failed attempt
// each), the where in SQL and in Go (the same selection outside the SQL
// subset). Groups: DeadLetterGroupCounts by payload.customer.id == 7 (one
// in 1,000 matches); each op counts the whole filter. Redrive: each op
// redrives a fresh 1% of them (payload.slice == k, 1,000 of 100,000),
// no patch: set-based batches in SQL, one by one in Go (counted, listed
// and matched in Go first). Each reports dead letters scanned per second;
// Redrive also replays per second.
func BenchDLQByPayload(b *testing.B, s store.Store) {
	ctx := context.Background()
	c, err := backstop.NewClient(s, &backstop.Config{Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	n := envInt("BACKSTOP_BENCH_TASKS", 100_000)
	queue := fmt.Sprintf("dlqwhere-%d", time.Now().UnixNano())
	now := time.Now().UTC().Truncate(time.Microsecond)
	for start := 0; start < n; start += 5000 {
		chunk := make([]*bt.Task, 0, 5000)
		for i := start; i < min(start+5000, n); i++ {
			p := fmt.Sprintf(`{"customer":{"id":%d,"name":"customer %d"},"slice":%d,"order":{"lines":[1,2,3],"total":%d.5}}`, i%1000, i, i%100, i)
			chunk = append(chunk, &bt.Task{ID: fmt.Sprintf("%s-%09d", queue, i), Queue: queue, Kind: "noop", State: bt.StatePending,
				MaxAttempts: 1, Payload: json.RawMessage(p), RunAt: now, CreatedAt: now, UpdatedAt: now,
				Attributes: map[string]string{"tenant": "acme"}})
		}
		if _, err := s.Enqueue(ctx, chunk, store.EnqueueOpts{}); err != nil {
			b.Fatal(err)
		}
		got, err := s.Claim(ctx, store.ClaimParams{Queue: queue, WorkerID: "bench", Max: len(chunk), Now: now, Lease: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		ss := make([]store.Settlement, len(got))
		for i, t := range got {
			ss[i] = store.Settlement{TaskID: t.ID, ExecutionID: t.ExecutionID, Outcome: bt.OutcomePermanentError,
				Error: fmt.Sprintf("boom %d", i%7), FinishedAt: now, State: bt.StateDead, DeadReason: bt.ReasonPermanentError}
		}
		if _, err := s.Settle(ctx, ss); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct{ name, where string }{
		{"Groups/SQL", `payload.customer.id == 7`},
		{"Groups/Go", `payload.customer.id + 0.0 == 7.0`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				g, err := c.DeadLetterGroupCounts(ctx, backstop.ListParams{Queue: queue, Where: bc.where}, 0)
				if err != nil {
					b.Fatal(err)
				}
				if g.Total != (n+999-7)/1000 {
					b.Fatalf("%d matches", g.Total)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "dead_letters_scanned/s")
		})
	}
	slice := 0 // each op takes the next 1%
	for _, bc := range []struct{ name, where string }{
		{"Redrive/SQL", `payload.slice == %d`},
		{"Redrive/Go", `payload.slice + 0.0 == %d.0`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			replayed := 0
			for b.Loop() {
				if slice == 100 {
					b.Fatal("every slice was redriven")
				}
				want := (n + 99 - slice) / 100
				res, err := c.Redrive(ctx, backstop.RedriveParams{Filter: backstop.ListParams{Queue: queue, Where: fmt.Sprintf(bc.where, slice)},
					Actor: "bench"}, nil)
				if err != nil {
					b.Fatal(err)
				}
				if res.Replayed != want {
					b.Fatalf("slice %d: redrove %d of %d", slice, res.Replayed, want)
				}
				replayed += res.Replayed
				slice++
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "dead_letters_scanned/s")
			b.ReportMetric(float64(replayed)/b.Elapsed().Seconds(), "replayed/s")
		})
	}
}
