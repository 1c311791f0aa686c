package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/remote"
)

// testTelemetry: the lifecycle paths that do not end in an in-process
// worker's settlement — lease expiry and the remote worker protocol —
// write their exact events and move the metrics by exactly what happened,
// on every store (a settlement that did not apply counts nothing).
func (s *suite) testTelemetry(t *testing.T) {
	t.Run("LeaseExpiry", func(t *testing.T) {
		t.Parallel()
		b, m := s.setupMetered(t)
		b.enqueue(backstop.EnqueueParams{ID: "e", Queue: "q", Kind: "k", MaxAttempts: 2})
		first := remoteClaim(t, b, 1)[0]
		b.clock.Advance(2 * time.Minute)
		maintain(t, b)
		maintain(t, b) // nothing left: counts nothing
		if _, err := remote.New(b.c.Engine()).Complete(b.ctx, "e", first.LeaseToken, nil, nil); !errors.Is(err, remote.ErrLeaseNotCurrent) {
			t.Fatalf("late completion: %v", err)
		}
		eq(t, "after the first expiry", m.read(t), map[string]int64{
			"backstop.attempts{kind=k,outcome=lease_expired,queue=q}":      1,
			"backstop.task.duration{kind=k,outcome=lease_expired,queue=q}": 1,
			"backstop.retries{kind=k,queue=q}":                             1,
		})
		remoteClaim(t, b, 1)
		b.clock.Advance(2 * time.Minute)
		maintain(t, b)
		eq(t, "events", b.types("e"), []string{"task.enqueued",
			"task.claimed", "task.lease_expired", "task.retry_scheduled",
			"task.claimed", "task.lease_expired", "task.dead_lettered"})
		eq(t, "metrics", m.read(t), map[string]int64{
			"backstop.attempts{kind=k,outcome=lease_expired,queue=q}":                           2,
			"backstop.task.duration{kind=k,outcome=lease_expired,queue=q}":                      2,
			"backstop.retries{kind=k,queue=q}":                                                  1,
			"backstop.dead_letters{kind=k,queue=q,reason=attempts_exhausted,too_complex=false}": 1,
		})
	})

	t.Run("RemoteCompleteAndFail", func(t *testing.T) {
		t.Parallel()
		b, m := s.setupMetered(t)
		b.enqueue(backstop.EnqueueParams{ID: "a", Queue: "q", Kind: "k"})
		b.enqueue(backstop.EnqueueParams{ID: "b", Queue: "q", Kind: "k"})
		b.enqueue(backstop.EnqueueParams{ID: "c", Queue: "q", Kind: "k", MaxAttempts: 1})
		byID := map[string]remote.Lease{}
		for _, tk := range remoteClaim(t, b, 3) {
			byID[tk.ID] = tk
		}
		if _, err := remote.New(b.c.Engine()).Complete(b.ctx, "a", byID["a"].LeaseToken, nil, nil); err != nil {
			t.Fatal(err)
		}
		outs, err := remote.New(b.c.Engine()).CompleteMany(b.ctx, []remote.Completion{{TaskID: "b", LeaseToken: byID["b"].LeaseToken},
			{TaskID: "a", LeaseToken: byID["a"].LeaseToken}})
		if err != nil || outs[0].Err != nil || !errors.Is(outs[1].Err, remote.ErrLeaseNotCurrent) {
			t.Fatalf("batch: %+v %v", outs, err)
		}
		if _, err := remote.New(b.c.Engine()).Fail(b.ctx, remote.Failure{TaskID: "c", LeaseToken: byID["c"].LeaseToken,
			Outcome: bt.OutcomeTransientError, Error: "503"}); err != nil {
			t.Fatal(err)
		}
		eq(t, "events a", b.types("a"), []string{"task.enqueued", "task.claimed", "task.started", "task.succeeded"})
		eq(t, "events c", b.types("c"), []string{"task.enqueued", "task.claimed", "task.started", "task.failed", "task.dead_lettered"})
		eq(t, "metrics", m.read(t), map[string]int64{
			"backstop.attempts{kind=k,outcome=succeeded,queue=q}":                               2,
			"backstop.task.duration{kind=k,outcome=succeeded,queue=q}":                          2,
			"backstop.attempts{kind=k,outcome=transient_error,queue=q}":                         1,
			"backstop.task.duration{kind=k,outcome=transient_error,queue=q}":                    1,
			"backstop.dead_letters{kind=k,queue=q,reason=attempts_exhausted,too_complex=false}": 1,
		})
	})
}

// meter reads the attempt metrics of a metered bundle.
type meter struct{ r *sdkmetric.ManualReader }

// setupMetered is setup with the library's metrics going to a manual
// reader.
func (s *suite) setupMetered(t *testing.T) (*bundle, *meter) {
	r := sdkmetric.NewManualReader()
	b := s.setup(t, &backstop.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r)),
		Retry: &backstop.RetryPolicy{Schedule: []backstop.Duration{0}}})
	return b, &meter{r}
}

// read returns the non-zero values of the attempt, duration, retry and
// dead-letter instruments, as "name{k=v,...}".
func (m *meter) read(t *testing.T) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	add := func(name string, set attribute.Set, v int64) {
		if v == 0 {
			return
		}
		var kv []string
		for _, a := range set.ToSlice() {
			kv = append(kv, string(a.Key)+"="+a.Value.Emit())
		}
		out[name+"{"+strings.Join(kv, ",")+"}"] += v
	}
	for _, sm := range rm.ScopeMetrics {
		for _, mm := range sm.Metrics {
			switch mm.Name {
			case "backstop.attempts", "backstop.task.duration", "backstop.retries", "backstop.dead_letters":
			default:
				continue
			}
			switch d := mm.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					add(mm.Name, p.Attributes, p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					add(mm.Name, p.Attributes, int64(p.Count))
				}
			}
		}
	}
	return out
}

func remoteClaim(t *testing.T, b *bundle, n int) []remote.Lease {
	t.Helper()
	ts, err := remote.New(b.c.Engine()).Claim(b.ctx, remote.Claim{Queues: []string{"q"}, WorkerID: "remote", Max: n, Lease: 10 * time.Second})
	if err != nil || len(ts) != n {
		t.Fatalf("claimed %d, want %d: %v", len(ts), n, err)
	}
	return ts
}

func maintain(t *testing.T, b *bundle) {
	t.Helper()
	if err := backstop.Maintain(b.ctx, b.c); err != nil {
		t.Fatal(err)
	}
}
