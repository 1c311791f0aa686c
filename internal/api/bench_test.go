package api_test

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

func benchClient(b *bundle, role api.Role) *apiclient.Client {
	c := apiclient.New(b.ts.URL, b.secret[role])
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	c.HTTP = &http.Client{Transport: tr, Timeout: time.Minute}
	return c
}

// BenchmarkEnqueueBatch100 enqueues over HTTP in batches of 100 on SQLite;
// tasks/s is the figure docs/benchmarks.md tracks.
func BenchmarkEnqueueBatch100(b *testing.B) {
	bb := setup(b, testdbSQLite2(b), setupOpts{rateLimit: -1})
	c := benchClient(bb, api.RoleOperator)
	batch := make([]apiclient.Task, 100)
	for i := range batch {
		batch[i] = apiclient.Task{Queue: "bench", Kind: "noop"}
	}
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		if _, err := c.EnqueueBatch(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/time.Since(start).Seconds(), "tasks/s")
	b.ReportMetric(peakRSSMiB(), "peak-RSS-MiB")
}

// BenchmarkRemoteRoundTrip: 8 remote workers claim (up to 10 at a time) and
// complete no-op tasks over HTTP on SQLite.
func BenchmarkRemoteRoundTrip(b *testing.B) {
	bb := setup(b, testdbSQLite2(b), setupOpts{rateLimit: -1})
	ctx := context.Background()
	n := b.N
	params := make([]backstop.EnqueueParams, 0, 1000)
	for left := n; left > 0; left -= len(params) {
		params = params[:0]
		for range min(left, 1000) {
			params = append(params, backstop.EnqueueParams{Queue: "bench", Kind: "noop"})
		}
		if _, err := bb.lib.EnqueueMany(ctx, params); err != nil {
			b.Fatal(err)
		}
	}
	c := benchClient(bb, api.RoleOperator)
	var mu sync.Mutex
	done := 0
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for {
				ts, err := c.Claim(ctx, api.ClaimRequest{Queues: []string{"bench"}, WorkerID: "bench-" + string(rune('a'+w)), Max: 10})
				if err != nil {
					b.Error(err)
					return
				}
				if len(ts) == 0 {
					return
				}
				for _, t := range ts {
					if _, err := c.Complete(ctx, t.ID, api.CompleteRequest{LeaseToken: t.LeaseToken}); err != nil {
						b.Error(err)
						return
					}
				}
				mu.Lock()
				done += len(ts)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(done)/time.Since(start).Seconds(), "tasks/s")
	b.ReportMetric(peakRSSMiB(), "peak-RSS-MiB")
	if done != n {
		b.Fatalf("completed %d of %d", done, n)
	}
}

// peakRSSMiB is the process's peak resident set (VmHWM): server and clients
// together, so an upper bound on what the server alone would use.
func peakRSSMiB() float64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err == nil {
				return float64(kb) / 1024
			}
		}
	}
	return -1
}
