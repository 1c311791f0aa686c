package maintenance_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/internal/testclock"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
)

// BenchmarkActivityRollup is one round of the activity rollup over an hour
// in which 10,000 tasks succeeded and 1,000 attempts failed, spread over
// 10 queues × 5 kinds: each iteration rolls up a new such hour (made
// untimed). Run it short (docs/benchmarks.md, "Activity rollup"):
//
//	go test -run '^$' -bench BenchmarkActivityRollup -benchtime 3x ./internal/maintenance/
func BenchmarkActivityRollup(b *testing.B) {
	for _, st := range []struct {
		name string
		db   func(testing.TB) string
	}{{"sqlite", testdb.SQLite}, {"postgres", testdb.Postgres}} {
		b.Run(st.name, func(b *testing.B) {
			ctx := context.Background()
			s, err := dburl.Open(ctx, st.db(b))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			if err := s.Migrate(ctx); err != nil {
				b.Fatal(err)
			}
			clock := testclock.New()
			e, err := engine.New(s, &engine.Config{Clock: clock, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			svc := maintenance.NewActivity(s, e.Now, time.Second)
			if err := svc.RunOnce(ctx); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				finishHour(b, ctx, e, s, clock, i)
				b.StartTimer()
				if err := svc.RunOnce(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(11000, "finished/round")
		})
	}
}

// finishHour makes an hour of finished work from the clock's time on
// (10,000 successes, 1,000 failed attempts retried later) and moves the
// clock past it and the rollup's settle time.
func finishHour(b *testing.B, ctx context.Context, e *engine.Engine, s store.Store, clock *testclock.Clock, round int) {
	start := clock.Now()
	const perQueue = 1100
	for q := range 10 {
		queue := fmt.Sprintf("q%d", q)
		params := make([]engine.EnqueueParams, perQueue)
		for i := range params {
			params[i] = engine.EnqueueParams{ID: fmt.Sprintf("r%d-%s-%d", round, queue, i), Queue: queue, Kind: fmt.Sprintf("k%d", i%5)}
		}
		tasks, err := e.PrepareAll(params)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Enqueue(ctx, tasks, e.EnqueueOpts(ctx, params, tasks)); err != nil {
			b.Fatal(err)
		}
		claimed, bad, err := e.Claim(ctx, engine.ClaimParams{Queue: queue, WorkerID: "w", Max: perQueue, Lease: time.Hour})
		if err != nil || len(bad) > 0 || len(claimed) != perQueue {
			b.Fatalf("claim %s: %d %v %v", queue, len(claimed), bad, err)
		}
		sets := make([]store.Settlement, len(claimed))
		for i, t := range claimed {
			at := start.Add(time.Duration(q*perQueue+i) * time.Hour / (10 * perQueue))
			sets[i] = store.Settlement{TaskID: t.ID, ExecutionID: t.ExecutionID, FinishedAt: at, Outcome: bt.OutcomeSucceeded, State: bt.StateSucceeded}
			if i%11 == 0 {
				sets[i].Outcome, sets[i].State, sets[i].RunAt, sets[i].Error = bt.OutcomeTransientError, bt.StateScheduled, at.Add(24*time.Hour), "boom"
			}
		}
		if _, err := e.Settle(ctx, sets); err != nil {
			b.Fatal(err)
		}
	}
	clock.Advance(time.Hour + maintenance.ActivitySettle + time.Second)
}
