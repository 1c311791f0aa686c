package bench

import (
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"
)

// stages records, per task of a latency run, when it was created (the
// engine's clock, in the enqueue), when its Enqueue call returned (its
// commit), when the claim that took it began (attempted_at: the claim's
// time) and when its handler started; so the slowest pickups can be taken
// apart: the enqueue (creation → commit), the wait for a claim (commit →
// claim start: the claim in flight, the wake-up) and the claim itself with
// the hand-off to the handler (claim start → handler start).
type stages struct {
	mu    sync.Mutex
	start time.Time
	rows  map[string]*stageRow
}

type stageRow struct {
	created, committed, claimed, started time.Time
}

func newStages(start time.Time, n int) *stages {
	return &stages{start: start, rows: make(map[string]*stageRow, n)}
}

func (s *stages) row(id string) *stageRow {
	r := s.rows[id]
	if r == nil {
		r = &stageRow{}
		s.rows[id] = r
	}
	return r
}

func (s *stages) committed(id string, at time.Time) {
	s.mu.Lock()
	s.row(id).committed = at
	s.mu.Unlock()
}

func (s *stages) started(id string, created time.Time, claimed *time.Time, at time.Time) {
	s.mu.Lock()
	r := s.row(id)
	r.created, r.started = created, at
	if claimed != nil {
		r.claimed = *claimed
	}
	s.mu.Unlock()
}

// report prints the stages' p50 / p99 over every task and, over the
// slowest 1 % (creation → handler start), each stage's p50 and how many of
// them it was the largest part of; with BACKSTOP_BENCH_STAGES set, every
// task's stages as CSV (ms since the run's start) to that file.
func (s *stages) report(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var rows []stageSpan
	for _, r := range s.rows {
		if r.created.IsZero() || r.committed.IsZero() || r.claimed.IsZero() {
			continue
		}
		rows = append(rows, stageSpan{at: r.created.Sub(s.start), total: r.started.Sub(r.created),
			enq: r.committed.Sub(r.created), wait: r.claimed.Sub(r.committed), clm: r.started.Sub(r.claimed)})
	}
	if len(rows) == 0 {
		return
	}
	if path := os.Getenv("BACKSTOP_BENCH_STAGES"); path != "" {
		if err := writeStages(path, s.start, rows); err != nil {
			fmt.Fprintf(w, "bench: BACKSTOP_BENCH_STAGES: %v\n", err)
		}
	}
	pct := func(pick func(stageSpan) time.Duration, rs []stageSpan) (time.Duration, time.Duration) {
		ds := make([]time.Duration, len(rs))
		for i, r := range rs {
			ds[i] = pick(r)
		}
		slices.Sort(ds)
		return percentile(ds, 0.5), percentile(ds, 0.99)
	}
	parts := []struct {
		name string
		pick func(stageSpan) time.Duration
	}{{"enqueue", func(r stageSpan) time.Duration { return r.enq }}, {"wait_for_claim", func(r stageSpan) time.Duration { return r.wait }},
		{"claim_to_start", func(r stageSpan) time.Duration { return r.clm }}}
	for _, p := range parts {
		p50, p99 := pct(p.pick, rows)
		fmt.Fprintf(w, "bench: stage %s p50=%s p99=%s\n", p.name, ms(p50), ms(p99))
	}
	slices.SortFunc(rows, func(a, b stageSpan) int { return int(b.total - a.total) })
	slow := rows[:max(len(rows)/100, 1)]
	largest := make([]int, len(parts))
	for _, r := range slow {
		best := 0
		for i, p := range parts {
			if p.pick(r) > parts[best].pick(r) {
				best = i
			}
		}
		largest[best]++
	}
	for i, p := range parts {
		p50, _ := pct(p.pick, slow)
		fmt.Fprintf(w, "bench: slowest 1%% (%d) stage %s p50=%s largest_in=%d\n", len(slow), p.name, ms(p50), largest[i])
	}
}

// stageSpan is a task's stages, from its creation (at: since the run's start).
type stageSpan struct {
	at                    time.Duration
	total, enq, wait, clm time.Duration
}

// writeStages writes every task's stages as CSV (ms since the run's start).
func writeStages(path string, start time.Time, rows []stageSpan) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "# start_unix_ms=%d\ncreated_ms,total_ms,enqueue_ms,wait_ms,claim_ms\n", start.UnixMilli())
	for _, r := range rows {
		fmt.Fprintf(f, "%.3f,%.3f,%.3f,%.3f,%.3f\n", msf(r.at), msf(r.total), msf(r.enq), msf(r.wait), msf(r.clm))
	}
	return f.Close()
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
