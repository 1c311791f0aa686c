package cli

import (
	"context"
	"log/slog"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/telemetry"
	"github.com/backstophq/backstop/internal/testclock"
	"github.com/backstophq/backstop/internal/testmetric"
	"github.com/backstophq/backstop/store"
)

// TestLimitWaitingGaugeUsesTheClock: backstop_limit_waiting, as the binary
// registers it, counts the tasks a rate limit holds back at the client's
// clock. On a clock stopped an hour ago, with its one token just taken,
// the budget is empty and both pending tasks wait (the wall clock would
// have refilled it an hour ago, and say none wait).
func TestLimitWaitingGaugeUsesTheClock(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		ctx := context.Background()
		s, err := dburl.Open(ctx, e.db)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		clk := testclock.At(time.Now().Add(-time.Hour))
		c, err := backstop.NewClient(s, &backstop.Config{Clock: clk, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.SetLimit(ctx, backstop.Limit{Name: "slow", Queue: "rl", Rate: 1, Burst: 1}, "test"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.SetLimit(ctx, backstop.Limit{Name: "idle", Queue: "other", Concurrency: 3}, "test"); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "rl", Kind: "k"}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Claim(ctx, store.ClaimParams{Queue: "rl", WorkerID: "w", Max: 3, Now: clk.Now(), Lease: time.Minute, Limited: true})
		if err != nil || len(got) != 1 {
			t.Fatalf("claim: %d tasks, %v; want the one token's", len(got), err)
		}
		reader := sdkmetric.NewManualReader()
		stop := startGauges(ctx, &telemetry.Telemetry{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))},
			c, nil, slog.New(slog.DiscardHandler))
		defer stop()
		g := testmetric.Collect(t, reader)["backstop.limit.waiting"]
		if g["limit=slow"] != 2 || len(g) != 2 || g["limit=idle"] != 0 {
			t.Fatalf("backstop.limit.waiting %v, want slow 2 and idle 0", g)
		}
	})
}
