// Package activity is the history of finished work beyond the last hour:
// the rollup's shape (two resolutions of buckets, each row one bucket ×
// queue × kind), its latency histograms (fixed, log-spaced, mergeable by
// adding counts), and the report the API, the CLI and the console read
// (GET /v1/activity?window=24h|7d). The maintenance service
// (internal/maintenance/activity.go) writes the rows; this package only
// shapes them. It never reads the task table.
package activity

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/backstophq/backstop/store"
)

// Resolution is one width of rollup bucket and how long its rows are kept.
type Resolution struct {
	Width, Keep time.Duration
}

// The rollup's two resolutions: five-minute buckets kept two days (the
// 24 h window) and hourly buckets kept eight days (the 7 d window).
var (
	Fine   = Resolution{Width: 5 * time.Minute, Keep: 48 * time.Hour}
	Coarse = Resolution{Width: time.Hour, Keep: 8 * 24 * time.Hour}
)

// Resolutions are the rollup's resolutions, finest first.
var Resolutions = []Resolution{Fine, Coarse}

// Window is a span of history the report covers, at one resolution.
type Window struct {
	Name string
	Span time.Duration
	Res  Resolution
}

// Windows are the windows a report may cover.
var Windows = []Window{
	{Name: "24h", Span: 24 * time.Hour, Res: Fine},
	{Name: "7d", Span: 7 * 24 * time.Hour, Res: Coarse},
}

// ParseWindow names a window ("24h", "7d"); anything else is an error
// naming the choices.
func ParseWindow(s string) (Window, error) {
	for _, w := range Windows {
		if w.Name == s {
			return w, nil
		}
	}
	return Window{}, fmt.Errorf("window %q: want 24h or 7d", s)
}

// Bounds are the latency histograms' bucket upper bounds in microseconds:
// 1 ms × √2^i for i = 0…47 (1 ms to about 3.3 h). Bucket i holds durations
// below Bounds[i] and at least Bounds[i-1]; bucket len(Bounds) holds the
// longer ones. A percentile read from them is within a bucket's ratio
// (√2) of the true one. Changing them changes the meaning of stored rows.
var Bounds = func() []int64 {
	out := make([]int64, 48)
	for i := range out {
		out[i] = int64(math.Round(1000 * math.Pow(math.Sqrt2, float64(i))))
	}
	return out
}()

// Index is the histogram bucket of a duration in microseconds.
func Index(us int64) int {
	i, _ := slices.BinarySearch(Bounds, us+1) // the first bound above us
	return i
}

// Quantile reads the q-quantile (0 < q ≤ 1) of a histogram of Bounds,
// interpolated inside its bucket (geometrically; linearly below the first
// bound); ok is false when it is empty.
func Quantile(h []int64, q float64) (d time.Duration, ok bool) {
	var n int64
	for _, c := range h {
		n += c
	}
	if n == 0 {
		return 0, false
	}
	rank := q * float64(n)
	var seen int64
	for i, c := range h {
		if c == 0 || float64(seen+c) < rank {
			seen += c
			continue
		}
		frac := (rank - float64(seen)) / float64(c)
		switch {
		case i == 0: // [0, 1 ms): linear
			return time.Duration(float64(Bounds[0])*frac) * time.Microsecond, true
		case i >= len(Bounds): // past the last bound: at most one more ratio
			lo := float64(Bounds[len(Bounds)-1])
			return time.Duration(lo*math.Pow(math.Sqrt2, frac)) * time.Microsecond, true
		}
		lo, hi := float64(Bounds[i-1]), float64(Bounds[i])
		return time.Duration(lo*math.Pow(hi/lo, frac)) * time.Microsecond, true
	}
	return time.Duration(Bounds[len(Bounds)-1]) * time.Microsecond, true
}

// Figures are the counts and latencies of one bucket, one group or a
// whole window.
type Figures struct {
	Succeeded int64 `json:"succeeded"`
	// Failed counts failed attempts (errors, timeouts, expired leases);
	// Retried, those of them the task outlived (it was tried again).
	Failed  int64 `json:"failed"`
	Retried int64 `json:"retried"`
	// Dead counts tasks that became dead letters.
	Dead int64 `json:"dead"`
	// FailureRate is Failed / (Succeeded + Failed); null without attempts.
	FailureRate *float64 `json:"failure_rate"`
	// Wait: from a task's availability (run_at) to the start of the
	// attempt that succeeded; Run: from an attempt's start to its end
	// (succeeded and failed ones). Milliseconds; null without samples.
	WaitP50 *float64 `json:"wait_p50_ms"`
	WaitP95 *float64 `json:"wait_p95_ms"`
	RunP50  *float64 `json:"run_p50_ms"`
	RunP95  *float64 `json:"run_p95_ms"`
}

// Point is one bucket of a series, named by its start.
type Point struct {
	At time.Time `json:"at"`
	Figures
}

// Group is one queue and kind's figures over the window.
type Group struct {
	Queue string `json:"queue"`
	Kind  string `json:"kind"`
	Figures
}

// Report is a window of history, optionally for one queue and/or kind.
type Report struct {
	Window        string    `json:"window"`
	BucketSeconds int       `json:"bucket_seconds"`
	From          time.Time `json:"from"`
	Until         time.Time `json:"until"`
	Queue         string    `json:"queue,omitempty"`
	Kind          string    `json:"kind,omitempty"`
	// RolledUpTo is the rollup's watermark: work finished after it is not
	// counted yet (null: the rollup has not run).
	RolledUpTo *time.Time `json:"rolled_up_to"`
	// Series has one point per bucket of the window, oldest first (empty
	// buckets included); Totals sums the window; Groups are its queue ×
	// kind pairs with any work, busiest first.
	Series []Point `json:"series"`
	Totals Figures `json:"totals"`
	Groups []Group `json:"groups"`
}

// Range is the buckets a window ending at now covers: from the start of
// the bucket Span before now's bucket ended, up to the end of now's.
func (w Window) Range(now time.Time) (from, until time.Time) {
	until = now.UTC().Truncate(w.Res.Width).Add(w.Res.Width)
	return until.Add(-w.Span), until
}

// sum is rows added up: counts and histograms.
type sum struct{ store.ActivityRow }

func (s *sum) add(r store.ActivityRow) { s.Add(r) }

func (s *sum) figures() Figures {
	f := Figures{Succeeded: s.Succeeded, Failed: s.Failed, Retried: s.Retried, Dead: s.Dead}
	if n := s.Succeeded + s.Failed; n > 0 {
		r := float64(s.Failed) / float64(n)
		f.FailureRate = &r
	}
	ms := func(h []int64, q float64) *float64 {
		d, ok := Quantile(h, q)
		if !ok {
			return nil
		}
		v := math.Round(float64(d)/float64(time.Millisecond)*1000) / 1000
		return &v
	}
	f.WaitP50, f.WaitP95 = ms(s.Wait, 0.5), ms(s.Wait, 0.95)
	f.RunP50, f.RunP95 = ms(s.Run, 0.5), ms(s.Run, 0.95)
	return f
}

// Build makes the report of w ending at now from the rollup rows of its
// resolution in its range (those of other queues or kinds than asked for
// are the caller's to leave out).
func Build(w Window, now time.Time, queue, kind string, rows []store.ActivityRow, rolledUpTo *time.Time) *Report {
	from, until := w.Range(now)
	n := int(w.Span / w.Res.Width)
	buckets := make([]sum, n)
	var total sum
	groups := map[[2]string]*sum{}
	for _, r := range rows {
		i := int(r.Bucket.Sub(from) / w.Res.Width)
		if i < 0 || i >= n {
			continue
		}
		buckets[i].add(r)
		total.add(r)
		k := [2]string{r.Queue, r.Kind}
		if groups[k] == nil {
			groups[k] = &sum{}
		}
		groups[k].add(r)
	}
	rep := &Report{Window: w.Name, BucketSeconds: int(w.Res.Width / time.Second), From: from, Until: until,
		Queue: queue, Kind: kind, RolledUpTo: rolledUpTo, Series: make([]Point, n), Totals: total.figures(), Groups: []Group{}}
	for i := range buckets {
		rep.Series[i] = Point{At: from.Add(time.Duration(i) * w.Res.Width), Figures: buckets[i].figures()}
	}
	for k, s := range groups {
		rep.Groups = append(rep.Groups, Group{Queue: k[0], Kind: k[1], Figures: s.figures()})
	}
	slices.SortFunc(rep.Groups, func(a, b Group) int {
		if d := (b.Succeeded + b.Failed + b.Dead) - (a.Succeeded + a.Failed + a.Dead); d != 0 {
			if d > 0 {
				return 1
			}
			return -1
		}
		return strings.Compare(a.Queue+"\x00"+a.Kind, b.Queue+"\x00"+b.Kind)
	})
	return rep
}
