package bench

import (
	"fmt"
	"math"
	"runtime/metrics"
	"time"
)

// goRuntime reads the Go runtime's own figures over a run: how long
// runnable goroutines waited to run (the scheduler on a busy box), and the
// garbage collector's cycles and stop-the-world pauses.
type goRuntime struct{ before []metrics.Sample }

var goRuntimeMetrics = []string{"/sched/latencies:seconds", "/sched/pauses/total/gc:seconds", "/gc/cycles/total:gc-cycles"}

func startGoRuntime() *goRuntime {
	g := &goRuntime{before: samples()}
	metrics.Read(g.before)
	return g
}

func samples() []metrics.Sample {
	s := make([]metrics.Sample, len(goRuntimeMetrics))
	for i, n := range goRuntimeMetrics {
		s[i].Name = n
	}
	return s
}

// GoRuntimeResult: the run's goroutine scheduling latency (p50, p99, and
// the bucket its longest fell in, each a bucket's upper bound), its GC
// cycles and their stop-the-world pauses (p99 and the longest's bucket).
type GoRuntimeResult struct {
	SchedP50, SchedP99, SchedMax time.Duration
	GCCycles                     uint64
	GCPauses                     uint64
	GCPauseP99, GCPauseMax       time.Duration
}

func (r GoRuntimeResult) String() string {
	return fmt.Sprintf("bench: go sched_latency p50=%s p99=%s max<=%s gc_cycles=%d gc_pauses=%d gc_pause p99=%s max<=%s",
		ms(r.SchedP50), ms(r.SchedP99), ms(r.SchedMax), r.GCCycles, r.GCPauses, ms(r.GCPauseP99), ms(r.GCPauseMax))
}

func (g *goRuntime) stop() GoRuntimeResult {
	after := samples()
	metrics.Read(after)
	var r GoRuntimeResult
	if h := histDelta(g.before[0], after[0]); h != nil {
		r.SchedP50, r.SchedP99, r.SchedMax = h.q(0.5), h.q(0.99), h.q(1)
	}
	if h := histDelta(g.before[1], after[1]); h != nil {
		r.GCPauses, r.GCPauseP99, r.GCPauseMax = h.n, h.q(0.99), h.q(1)
	}
	if after[2].Value.Kind() == metrics.KindUint64 && g.before[2].Value.Kind() == metrics.KindUint64 {
		r.GCCycles = after[2].Value.Uint64() - g.before[2].Value.Uint64()
	}
	return r
}

type hist struct {
	counts  []uint64
	buckets []float64
	n       uint64
}

func histDelta(a, b metrics.Sample) *hist {
	if a.Value.Kind() != metrics.KindFloat64Histogram || b.Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	ha, hb := a.Value.Float64Histogram(), b.Value.Float64Histogram()
	h := &hist{counts: make([]uint64, len(hb.Counts)), buckets: hb.Buckets}
	for i := range hb.Counts {
		h.counts[i] = hb.Counts[i] - ha.Counts[i]
		h.n += h.counts[i]
	}
	return h
}

// q is the upper bound of the bucket holding the p-quantile.
func (h *hist) q(p float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	want := uint64(math.Ceil(p * float64(h.n)))
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= max(want, 1) {
			up := h.buckets[i+1]
			if math.IsInf(up, 1) {
				up = h.buckets[i]
			}
			return time.Duration(up * float64(time.Second))
		}
	}
	return 0
}
