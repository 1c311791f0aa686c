package activity_test

import (
	"math"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/activity"
	"github.com/backstophq/backstop/store"
)

// A duration falls in the bucket whose bounds hold it, and a percentile
// read back from the histogram is within the buckets' ratio (√2) of it;
// histograms of two rows merge by adding.
func TestHistogram(t *testing.T) {
	for _, d := range []time.Duration{0, 500 * time.Microsecond, time.Millisecond, 3 * time.Millisecond, 250 * time.Millisecond,
		2 * time.Second, 90 * time.Second, time.Hour, 10 * time.Hour} {
		us := d.Microseconds()
		i := activity.Index(us)
		if i < len(activity.Bounds) && us >= activity.Bounds[i] || i > 0 && us < activity.Bounds[i-1] {
			t.Fatalf("%s: bucket %d does not hold it", d, i)
		}
		h := make([]int64, i+1)
		h[i] = 1
		got, ok := activity.Quantile(h, 0.5)
		if !ok {
			t.Fatalf("%s: empty", d)
		}
		if d >= time.Millisecond && d < 3*time.Hour && (float64(got) < float64(d)/math.Sqrt2 || float64(got) > float64(d)*math.Sqrt2) {
			t.Fatalf("%s: p50 %s, not within √2", d, got)
		}
	}
	if _, ok := activity.Quantile(nil, 0.5); ok {
		t.Fatal("an empty histogram has a percentile")
	}
	// 90 fast (≈ 2 ms) and 10 slow (≈ 1 s), in two rows: p50 fast, p95 slow.
	var r store.ActivityRow
	r.Add(store.ActivityRow{Succeeded: 90, Run: hist(2*time.Millisecond, 90)})
	r.Add(store.ActivityRow{Succeeded: 10, Run: hist(time.Second, 10)})
	rep := activity.Build(activity.Windows[0], time.Now(), "", "", []store.ActivityRow{}, nil)
	if len(rep.Series) != 288 || rep.Totals.RunP50 != nil || rep.Totals.FailureRate != nil {
		t.Fatalf("empty report: %d points, %+v", len(rep.Series), rep.Totals)
	}
	now := time.Date(2026, 11, 27, 12, 3, 0, 0, time.UTC)
	r.Width, r.Bucket, r.Queue, r.Kind = activity.Fine.Width, now.Truncate(activity.Fine.Width), "q", "k"
	rep = activity.Build(activity.Windows[0], now, "", "", []store.ActivityRow{r}, nil)
	p50, p95 := *rep.Totals.RunP50, *rep.Totals.RunP95
	if p50 < 2/math.Sqrt2 || p50 > 2*math.Sqrt2 || p95 < 1000/math.Sqrt2 || p95 > 1000*math.Sqrt2 {
		t.Fatalf("p50 %v ms, p95 %v ms; want about 2 and 1000", p50, p95)
	}
	if last := rep.Series[len(rep.Series)-1]; !last.At.Equal(r.Bucket) || last.Succeeded != 100 {
		t.Fatalf("last point %+v, want the row's bucket", last)
	}
}

func hist(d time.Duration, n int64) []int64 {
	h := make([]int64, activity.Index(d.Microseconds())+1)
	h[len(h)-1] = n
	return h
}

// FuzzParseWindow: only 24h and 7d are windows; anything else is an error
// naming it.
func FuzzParseWindow(f *testing.F) {
	for _, s := range []string{"24h", "7d", "", "1h", "24H", "7d ", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w, err := activity.ParseWindow(s)
		if (err == nil) != (s == "24h" || s == "7d") {
			t.Fatalf("%q: %v", s, err)
		}
		if err == nil && (w.Name != s || w.Span%w.Res.Width != 0) {
			t.Fatalf("%q: %+v", s, w)
		}
	})
}
