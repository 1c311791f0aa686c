package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlitestore"
)

// OrderingConfig is the ordered-processing simulation (seed 001): Keys
// subscriptions each produce one result per simulated minute; each result
// reaches the queue after a random delivery delay (a LateFraction of them
// late enough to overtake the next one), a LostFraction never arrives;
// Workers consumers claim and handle them. The same workload runs with
// ordering off and on, on the real client and a SQLite store, with an
// injected clock.
type OrderingConfig struct {
	Keys         int
	Minutes      int
	Workers      int
	LateFraction float64
	LostFraction float64
	Seed         uint64
	// FirstHold is the ordered run's first_hold (docs/ordering.md): how long
	// a key without state buffers its first result. 0: admitted at once.
	FirstHold time.Duration
	Dir       string // where the SQLite files go (a temp dir)
}

// OrderingMode is one run's measurements.
type OrderingMode struct {
	Ordering       bool
	Delivered      int // results that reached the queue
	Handled        int
	Stale          int // dropped as stale (ordering on)
	FalseMisses    int // sequences reported/seen missing that did arrive
	TrueMisses     int // sequences reported missing that were lost
	Detectable     int // lost sequences with a later delivered result of the key
	Timeouts       int64
	CircuitBreaker int64
	Buffered       int64
	FirstHeld      int64         // of Buffered: held by the first hold
	FirstHold      time.Duration // the setting (ordering on)
	MeanBuffer     float64
	MaxBuffer      int
	DelayP50       time.Duration
	DelayP99       time.Duration
}

// OrderingResult is both runs.
type OrderingResult struct {
	Off, On OrderingMode
}

// Summary is the last line of `backstop bench ordering`.
func (r *OrderingResult) Summary() string {
	return fmt.Sprintf("ordering: false_miss_reduction=%s true_miss_recall=%s timeout_rate=%s circuit_breaker_rate=%s",
		pct(float64(r.Off.FalseMisses-r.On.FalseMisses), float64(r.Off.FalseMisses)),
		pct(float64(r.On.TrueMisses), float64(r.On.Detectable)),
		pct(float64(r.On.Timeouts), float64(r.On.gapBuffered())),
		pct(float64(r.On.CircuitBreaker), float64(r.On.gapBuffered())))
}

// gapBuffered is the tasks buffered behind a gap: the first hold's tasks
// are not counted, so the rates are not diluted by them.
func (m OrderingMode) gapBuffered() int64 {
	return m.Buffered - m.FirstHeld
}

func pct(a, b float64) string {
	if b == 0 {
		return "100.00%"
	}
	return fmt.Sprintf("%.2f%%", 100*a/b)
}

// Report prints one mode.
func (m OrderingMode) Report(w io.Writer) {
	name := "off"
	if m.Ordering {
		name = "on"
	}
	hold := ""
	if m.Ordering {
		hold = fmt.Sprintf(" first_hold=%s first_held=%d", m.FirstHold, m.FirstHeld)
	}
	fmt.Fprintf(w, "ordering %-3s handled=%d delivered=%d stale=%d false_misses=%d true_misses_reported=%d/%d timeouts=%d circuit_breaker=%d buffered=%d%s buffer_mean=%.2f buffer_max=%d added_delay_p50=%s added_delay_p99=%s\n",
		name, m.Handled, m.Delivered, m.Stale, m.FalseMisses, m.TrueMisses, m.Detectable, m.Timeouts, m.CircuitBreaker,
		m.Buffered, hold, m.MeanBuffer, m.MaxBuffer, m.DelayP50, m.DelayP99)
}

type simClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *simClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

type simResult struct {
	key, minute int
	at          time.Duration // delivery time from the start; <0: lost
}

// workload is the deterministic arrival schedule for cfg.
func workload(cfg OrderingConfig) []simResult {
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	var out []simResult
	for k := 0; k < cfg.Keys; k++ {
		phase := time.Duration(rng.Int64N(int64(time.Minute)))
		for m := 0; m < cfg.Minutes; m++ {
			produced := time.Duration(m)*time.Minute + phase
			r := simResult{key: k, minute: m}
			switch x := rng.Float64(); {
			case x < cfg.LostFraction:
				r.at = -1
			case x < cfg.LostFraction+cfg.LateFraction:
				r.at = produced + 65*time.Second + time.Duration(rng.Int64N(int64(60*time.Second)))
			default:
				r.at = produced + 500*time.Millisecond + time.Duration(rng.Int64N(int64(4500*time.Millisecond)))
			}
			out = append(out, r)
		}
	}
	return out
}

const simQueue = "results"

// RunOrdering runs the simulation with ordering off, then on.
func RunOrdering(ctx context.Context, cfg OrderingConfig) (*OrderingResult, error) {
	if cfg.Keys < 1 || cfg.Minutes < 1 || cfg.Workers < 1 || cfg.LateFraction < 0 || cfg.LostFraction < 0 ||
		cfg.LateFraction+cfg.LostFraction > 1 || cfg.FirstHold < 0 {
		return nil, fmt.Errorf("bench: ordering: keys, minutes and workers must be positive, fractions in [0,1], first hold not negative")
	}
	// The two runs are independent (own store, clock and random source):
	// they run at the same time, each as deterministic as alone.
	var (
		modes [2]*OrderingMode
		errs  [2]error
		wg    sync.WaitGroup
	)
	for i, on := range []bool{false, true} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			modes[i], errs[i] = runMode(ctx, cfg, on, filepath.Join(cfg.Dir, fmt.Sprintf("ordering-%d.db", i)))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	res := &OrderingResult{Off: *modes[0], On: *modes[1]}
	return res, nil
}

func runMode(ctx context.Context, cfg OrderingConfig, on bool, path string) (*OrderingMode, error) {
	s, err := sqlitestore.Open(path)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		return nil, err
	}
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &simClock{t: start}
	qc := backstop.QueueConfig{}
	if on {
		qc.Ordering = backstop.OrderingConfig{Enabled: true, Step: 1, FirstHold: cfg.FirstHold}
	}
	c, err := backstop.NewClient(s, &backstop.Config{Clock: clk, Logger: slog.New(slog.DiscardHandler),
		Queues: map[string]backstop.QueueConfig{simQueue: qc}})
	if err != nil {
		return nil, err
	}
	work := workload(cfg)
	lost := map[[2]int]bool{}
	var arrivals []simResult
	lastDelivered := make([]int, cfg.Keys)
	for i := range lastDelivered {
		lastDelivered[i] = -1
	}
	for _, r := range work {
		if r.at < 0 {
			lost[[2]int{r.key, r.minute}] = true
			continue
		}
		arrivals = append(arrivals, r)
		lastDelivered[r.key] = max(lastDelivered[r.key], r.minute)
	}
	sort.SliceStable(arrivals, func(i, j int) bool { return arrivals[i].at < arrivals[j].at })
	mode := &OrderingMode{Ordering: on, Delivered: len(arrivals)}
	if on {
		mode.FirstHold = cfg.FirstHold
	}
	for k := range lost {
		if lastDelivered[k[0]] > k[1] {
			mode.Detectable++
		}
	}
	rng := rand.New(rand.NewPCG(cfg.Seed+1, 7))
	type meta struct {
		key, minute int
		delivered   time.Duration
	}
	byID := map[string]meta{}
	last := make([]int, cfg.Keys) // the handler's last handled minute per key
	for i := range last {
		last[i] = -1
	}
	pendingSeqs := make([]map[int]bool, cfg.Keys) // delivered, not handled: the key's buffer
	for i := range pendingSeqs {
		pendingSeqs[i] = map[int]bool{}
	}
	reported := map[[2]int]bool{}
	report := func(key, minute int) {
		if reported[[2]int{key, minute}] {
			return
		}
		reported[[2]int{key, minute}] = true
		if lost[[2]int{key, minute}] {
			mode.TrueMisses++
		} else {
			mode.FalseMisses++
		}
	}
	var delays []time.Duration
	var bufSum, bufN float64
	handle := func(id string, now time.Duration, gaps []backstop.Gap) {
		m := byID[id]
		delays = append(delays, now-m.delivered)
		mode.Handled++
		for _, g := range gaps {
			for seq := g.From; seq <= g.To; seq++ {
				report(m.key, int(seq))
			}
		}
		// The processor's own check (seed 001): a sequence skipped since
		// the last one it handled is recorded missing.
		for seq := last[m.key] + 1; seq < m.minute; seq++ {
			report(m.key, seq)
		}
		last[m.key] = max(last[m.key], m.minute)
		for seq := range pendingSeqs[m.key] {
			if seq <= m.minute {
				delete(pendingSeqs[m.key], seq)
			}
		}
	}
	end := time.Duration(cfg.Minutes)*time.Minute + 2*time.Minute + 5*time.Minute // the backoff horizon and more
	next := 0
	tick := time.Second
	for now := time.Duration(0); now <= end; now += tick {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		clk.set(start.Add(now))
		var batch []backstop.EnqueueParams
		for next < len(arrivals) && arrivals[next].at <= now {
			r := arrivals[next]
			next++
			id := fmt.Sprintf("r-%06d-%06d", r.key, r.minute)
			byID[id] = meta{r.key, r.minute, now}
			p := backstop.EnqueueParams{ID: id, Queue: simQueue, Kind: "result"}
			if on {
				p.OrderingKey, p.Sequence = fmt.Sprint("sub-", r.key), int64(r.minute)
			}
			batch = append(batch, p)
			pendingSeqs[r.key][r.minute] = true
		}
		if len(batch) > 0 {
			if _, err := c.EnqueueMany(ctx, batch); err != nil {
				return nil, err
			}
		}
		// A claim finds work only when this tick enqueued (ordering off),
		// admission admitted (ordering on) or the last claim was full:
		// without, it is skipped (it would return nothing).
		full := !on && len(batch) > 0
		for {
			admitted := c.OrderingStats().Admitted.Load()
			if err := c.OrderQueue(ctx, simQueue); err != nil {
				return nil, err
			}
			if !full && c.OrderingStats().Admitted.Load() == admitted {
				break
			}
			ts, err := s.Claim(ctx, store.ClaimParams{Queue: simQueue, WorkerID: "sim", Max: 1000, Now: clk.Now(), Lease: time.Minute})
			if err != nil {
				return nil, err
			}
			if len(ts) == 0 {
				break
			}
			var gaps map[string]store.OrderingInfo
			if on {
				ids := make([]string, len(ts))
				for i, t := range ts {
					ids[i] = t.ID
				}
				if gaps, err = s.OrderingInfo(ctx, ids); err != nil {
					return nil, err
				}
			}
			// W concurrent workers: within a group of W claimed tasks the
			// finishing order is random.
			for g := 0; g < len(ts); g += cfg.Workers {
				grp := ts[g:min(g+cfg.Workers, len(ts))]
				rng.Shuffle(len(grp), func(i, j int) { grp[i], grp[j] = grp[j], grp[i] })
			}
			ss := make([]store.Settlement, len(ts))
			for i, t := range ts {
				handle(t.ID, now, gaps[t.ID].Gaps)
				ss[i] = store.Settlement{TaskID: t.ID, ExecutionID: t.ExecutionID, Outcome: backstop.OutcomeSucceeded,
					FinishedAt: clk.Now(), State: backstop.StateSucceeded}
			}
			if _, err := s.Settle(ctx, ss); err != nil {
				return nil, err
			}
			full = len(ts) == 1000
			if !on && !full {
				break // every pending task was claimed; only ordering admits more
			}
		}
		for k := range pendingSeqs {
			if n := len(pendingSeqs[k]); n > 0 {
				bufSum += float64(n)
				bufN++
				mode.MaxBuffer = max(mode.MaxBuffer, n)
			}
		}
	}
	st := c.OrderingStats()
	mode.Timeouts, mode.CircuitBreaker, mode.Buffered = st.Timeouts.Load(), st.CircuitBreaker.Load(), st.Buffered.Load()
	mode.Stale = int(st.Stale.Load())
	mode.FirstHeld = st.FirstHeld.Load()
	if bufN > 0 {
		mode.MeanBuffer = bufSum / bufN
	}
	sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
	mode.DelayP50, mode.DelayP99 = quantile(delays, 0.50), quantile(delays, 0.99)
	return mode, nil
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[int(math.Min(float64(len(d)-1), math.Floor(q*float64(len(d)))))]
}
