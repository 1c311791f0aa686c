package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/remote"
)

// testPromises: documented defaults and metrics that no other test pins
// down, each checked through the engine on every store and, for metrics,
// by the value the instrument reports.
func (s *suite) testPromises(t *testing.T) {
	t.Run("DefaultCircuitBreakerIs10", func(t *testing.T) {
		t.Parallel()
		r := sdkmetric.NewManualReader()
		b := s.setup(t, &backstop.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r)),
			Queues: map[string]backstop.QueueConfig{oq: {Ordering: backstop.OrderingConfig{Enabled: true, Step: 1}}}})
		b.clock.freeze()
		b.ordEnqueue("k", 1)
		b.handleNext(1)
		// Sequence 2 never arrives: 9 successors wait behind the gap...
		for seq := int64(3); seq <= 11; seq++ {
			b.ordEnqueue("k", seq)
		}
		b.noClaim()
		eq(t, "circuit breaker at 9 buffered", b.c.OrderingStats().CircuitBreaker.Load(), int64(0))
		// ...and the 10th trips the breaker: all released, in order.
		b.ordEnqueue("k", 12)
		for seq := int64(3); seq <= 12; seq++ {
			b.handleNext(seq)
		}
		eq(t, "circuit breaker", b.c.OrderingStats().CircuitBreaker.Load(), int64(1))
		eq(t, "queue circuit breaker", b.c.QueueOrderingStats(oq).CircuitBreaker.Load(), int64(1))
		got := readSums(t, r, "backstop.ordering.")
		eq(t, "metric circuit_breaker", got["backstop.ordering.circuit_breaker{queue="+oq+"}"], int64(1))
		eq(t, "metric buffered", got["backstop.ordering.buffered{queue="+oq+"}"], int64(10))
	})

	t.Run("ExponentialJitterDelays", func(t *testing.T) {
		t.Parallel()
		base, factor, maxD := time.Second, 2.0, 10*time.Second
		b := s.setup(t, &backstop.Config{Retry: &backstop.RetryPolicy{Base: bt.Duration(base), Factor: factor, Max: bt.Duration(maxD)}})
		b.clock.freeze()
		const attempts = 8
		b.enqueue(backstop.EnqueueParams{ID: "x", Queue: "q", Kind: "k", MaxAttempts: attempts})
		var delays []time.Duration
		for n := 1; n < attempts; n++ {
			tk := remoteClaim(t, b, 1)[0]
			failedAt := b.clock.Now()
			if _, err := remote.New(b.c.Engine()).Fail(b.ctx, remote.Failure{TaskID: tk.ID, LeaseToken: tk.LeaseToken,
				Outcome: bt.OutcomeTransientError, Error: "503"}); err != nil {
				t.Fatal(err)
			}
			got := b.get("x")
			eq(t, fmt.Sprintf("state after attempt %d", n), got.State, backstop.StateScheduled)
			d := got.RunAt.Sub(failedAt.Truncate(time.Microsecond))
			// min(base·factor^(n-1), max) · (0.5 + rand), rand in [0,1).
			nominal := min(time.Duration(float64(base)*pow(factor, n-1)), maxD)
			if d < nominal/2-time.Microsecond || d >= nominal*3/2+time.Microsecond {
				t.Errorf("attempt %d: delay %v outside [%v, %v)", n, d, nominal/2, nominal*3/2)
			}
			delays = append(delays, d)
			b.clock.Advance(d)
			maintain(t, b) // promotes the due retry to pending
		}
		jittered := false
		for n, d := range delays {
			nominal := min(time.Duration(float64(base)*pow(factor, n)), maxD)
			jittered = jittered || d.Round(time.Millisecond) != nominal
		}
		if !jittered {
			t.Errorf("delays %v are exactly the nominal sequence: no jitter", delays)
		}
	})

	t.Run("TooComplexCounter", func(t *testing.T) {
		t.Parallel()
		r := sdkmetric.NewManualReader()
		b := s.setup(t, &backstop.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r)),
			Queues: map[string]backstop.QueueConfig{"plans": {Complexity: backstop.ComplexityPolicy{MaxComplexity: 10}}}})
		b.enqueue(backstop.EnqueueParams{Queue: "plans", Kind: "plan", Complexity: 5})
		b.enqueue(backstop.EnqueueParams{Queue: "plans", Kind: "plan", Complexity: 50})
		b.enqueue(backstop.EnqueueParams{Queue: "plans", Kind: "plan", Complexity: 99})
		got := readSums(t, r, "backstop.tasks.too_complex")
		eq(t, "too complex", got, map[string]int64{"backstop.tasks.too_complex{kind=plan,queue=plans}": 2})
	})

	t.Run("ReplayConflictCounter", func(t *testing.T) {
		t.Parallel()
		r := sdkmetric.NewManualReader()
		b := s.setup(t, &backstop.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))})
		b.dead(backstop.EnqueueParams{ID: "idem", Queue: "q", Kind: "k", IdempotencyKey: "key-1"})
		b.dead(backstop.EnqueueParams{ID: "fine", Queue: "q2", Kind: "k"})
		b.enqueue(backstop.EnqueueParams{ID: "holder", Queue: "other", Kind: "k", IdempotencyKey: "key-1"})
		if _, err := b.c.Replay(b.ctx, backstop.ReplayParams{ID: "idem"}); !errors.Is(err, backstop.ErrConflict) {
			t.Fatalf("replay over a held idempotency key: %v, want ErrConflict", err)
		}
		b.replay(backstop.ReplayParams{ID: "fine"})
		eq(t, "replays", readSums(t, r, "backstop.replays"), map[string]int64{
			"backstop.replays{result=conflict}": 1,
			"backstop.replays{result=ok}":       1,
		})
	})
}

// testHeartbeatingWorkers: the per-worker heartbeat gauge's source lists
// active, stopping and stale workers seen within the horizon, never
// stopped ones (backstop_worker_heartbeat_age_seconds).
func (s *suite) testHeartbeatingWorkers(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	b.clock.freeze()
	see := func(id string) {
		if err := remote.New(b.c.Engine()).SeeWorker(b.ctx, id, "node-"+id, []string{"q"}); err != nil {
			t.Fatal(err)
		}
	}
	ids := func() map[string]string {
		ws, err := b.c.HeartbeatingWorkers(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, w := range ws {
			out[w.ID] = string(w.State) + "@" + w.Host
		}
		return out
	}
	for _, id := range []string{"gone", "lost", "alive", "done"} {
		see(id)
	}
	if err := b.store.SetWorkerState(b.ctx, "done", backstop.WorkerStopped, b.clock.Now()); err != nil {
		t.Fatal(err)
	}
	eq(t, "all seen", ids(), map[string]string{"gone": "active@node-gone", "lost": "active@node-lost", "alive": "active@node-alive"})
	b.clock.Advance(50 * time.Minute)
	see("alive")
	see("lost")
	b.clock.Advance(20 * time.Minute) // gone: 70 min; lost: 20 min; alive: seen now
	see("alive")
	eq(t, "after 70 minutes", ids(), map[string]string{"lost": "stale@node-lost", "alive": "active@node-alive"})
}

func pow(x float64, n int) float64 {
	out := 1.0
	for range n {
		out *= x
	}
	return out
}

// readSums returns the non-zero int64 sums of the instruments whose name
// starts with prefix, as "name{k=v,...}".
func readSums(t *testing.T, r *sdkmetric.ManualReader, prefix string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			d, ok := m.Data.(metricdata.Sum[int64])
			if !ok || !strings.HasPrefix(m.Name, prefix) {
				continue
			}
			for _, p := range d.DataPoints {
				if p.Value == 0 {
					continue
				}
				var kv []string
				for _, a := range p.Attributes.ToSlice() {
					kv = append(kv, string(a.Key)+"="+a.Value.Emit())
				}
				out[m.Name+"{"+strings.Join(kv, ",")+"}"] += p.Value
			}
		}
	}
	return out
}
