package bench

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/backstophq/backstop/internal/probe"
)

// stages records, per task of a latency run, when it was created (the
// engine's clock, in the enqueue), when its Enqueue call returned (its
// commit), when the claim that took it began (attempted_at: the claim's
// time) and when its handler started; so the slowest pickups can be taken
// apart: the enqueue (creation → commit), the wait for a claim (commit →
// claim start: the claim in flight, the wake-up) and the claim itself with
// the hand-off to the handler (claim start → handler start). With
// BACKSTOP_BENCH_STAGES it is also the worker's stage probe (a
// probe.Sink: Claimed, Task), which takes the last apart (subStages).
type stages struct {
	mu    sync.Mutex
	start time.Time
	rows  map[string]*stageRow
}

type stageRow struct {
	created, committed, claimed, started time.Time
	// The stage probe's marks (BACKSTOP_BENCH_STAGES, internal/probe):
	// the claim statement that took the task (its kind, when it asked for
	// a connection, had one, and had its rows: execution, COMMIT and round
	// trip), when the claim reached the fetch loop and how many statements
	// it ran, when the fetch loop handed the task on, and when its
	// attempt's goroutine ran.
	pickKind                  string
	picks                     int
	acquire, acquired, picked time.Time
	returned, handed, running time.Time
}

// Claimed implements probe.Sink.
func (s *stages) Claimed(c *probe.Claim) {
	picks := c.Picks()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range c.IDs {
		r := s.row(id)
		r.pickKind, r.picks, r.returned = "store", len(picks), c.Returned
	}
	for _, p := range picks {
		for _, id := range p.IDs {
			r := s.row(id)
			r.pickKind = p.Kind
			r.acquire, r.acquired, r.picked = p.Acquire, p.Acquired, p.Done
		}
	}
}

// Task implements probe.Sink.
func (s *stages) Task(id string, stage probe.TaskStage, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch stage {
	case probe.Handed:
		s.row(id).handed = at
	case probe.Running:
		s.row(id).running = at
	}
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
// task's stages as CSV (ms since the run's start) to that file, and, from
// the stage probe, claim_to_start taken apart the same way (subStages).
// It returns the figures it printed.
func (s *stages) report(w io.Writer) []StageFigure {
	s.mu.Lock()
	defer s.mu.Unlock()
	var rows []stageSpan
	for _, r := range s.rows {
		if r.created.IsZero() || r.committed.IsZero() || r.claimed.IsZero() {
			continue
		}
		sp := stageSpan{at: r.created.Sub(s.start), total: r.started.Sub(r.created),
			enq: r.committed.Sub(r.created), wait: r.claimed.Sub(r.committed), clm: r.started.Sub(r.claimed)}
		if !r.returned.IsZero() && !r.handed.IsZero() && !r.running.IsZero() {
			sp.probed, sp.kind, sp.picks = true, r.pickKind, r.picks
			if r.acquire.IsZero() {
				// No statement marked (SQLite; the limited and fair
				// claims): the store's whole claim is its statement.
				r.acquire, r.acquired, r.picked = r.claimed, r.claimed, r.returned
			}
			sp.sub = [len(subStages)]time.Duration{r.acquire.Sub(r.claimed), r.acquired.Sub(r.acquire),
				r.picked.Sub(r.acquired), r.returned.Sub(r.picked), r.handed.Sub(r.returned),
				r.running.Sub(r.handed), r.started.Sub(r.running)}
		}
		rows = append(rows, sp)
	}
	if len(rows) == 0 {
		return nil
	}
	if path := os.Getenv("BACKSTOP_BENCH_STAGES"); path != "" {
		if err := writeStages(path, s.start, rows); err != nil {
			fmt.Fprintf(w, "bench: BACKSTOP_BENCH_STAGES: %v\n", err)
		}
	}
	var figs []StageFigure
	type part struct {
		name string
		pick func(stageSpan) time.Duration
	}
	parts := []part{{"enqueue", func(r stageSpan) time.Duration { return r.enq }}, {"wait_for_claim", func(r stageSpan) time.Duration { return r.wait }},
		{"claim_to_start", func(r stageSpan) time.Duration { return r.clm }}}
	for _, p := range parts {
		p50, p99 := spanPct(p.pick, rows)
		figs = append(figs, StageFigure{Name: p.name, P50: p50, P99: p99})
		fmt.Fprintf(w, "bench: stage %s p50=%s p99=%s\n", p.name, ms(p50), ms(p99))
	}
	slices.SortFunc(rows, func(a, b stageSpan) int { return int(b.total - a.total) })
	slow := rows[:max(len(rows)/100, 1)]
	largest := largestIn(slow, len(parts), func(r stageSpan, i int) time.Duration { return parts[i].pick(r) })
	for i, p := range parts {
		p50, _ := spanPct(p.pick, slow)
		fmt.Fprintf(w, "bench: slowest 1%% (%d) stage %s p50=%s largest_in=%d\n", len(slow), p.name, ms(p50), largest[i])
	}

	// The stage probe: claim_to_start in parts, over the tasks it saw.
	var probed []stageSpan
	for _, r := range rows {
		if r.probed {
			probed = append(probed, r)
		}
	}
	if len(probed) == 0 {
		return figs
	}
	fmt.Fprintf(w, "bench: claim_to_start split by the stage probe (%d of %d tasks):\n", len(probed), len(rows))
	sub := func(i int) func(stageSpan) time.Duration { return func(r stageSpan) time.Duration { return r.sub[i] } }
	for i, name := range subStages {
		p50, p99 := spanPct(sub(i), probed)
		figs = append(figs, StageFigure{Name: "claim_to_start." + name, P50: p50, P99: p99})
		fmt.Fprintf(w, "bench: substage %s p50=%s p99=%s\n", name, ms(p50), ms(p99))
	}
	slices.SortFunc(probed, func(a, b stageSpan) int { return int(b.clm - a.clm) })
	slowC := probed[:max(len(probed)/100, 1)]
	largest = largestIn(slowC, len(subStages), func(r stageSpan, i int) time.Duration { return r.sub[i] })
	c50, _ := spanPct(func(r stageSpan) time.Duration { return r.clm }, slowC)
	for i, name := range subStages {
		p50, _ := spanPct(sub(i), slowC)
		fmt.Fprintf(w, "bench: slowest 1%% of claim_to_start (%d, its p50=%s) substage %s p50=%s largest_in=%d\n",
			len(slowC), ms(c50), name, ms(p50), largest[i])
	}
	kinds, picks := map[string]int{}, map[int]int{}
	for _, r := range slowC {
		kinds[r.kind]++
		picks[min(r.picks, 4)]++
	}
	fmt.Fprintf(w, "bench: slowest 1%% of claim_to_start: claimed by cursor=%d head=%d store=%d; their claim ran 0/1/2/3/4+ statements: %d/%d/%d/%d/%d\n",
		kinds["cursor"], kinds["head"], kinds["store"], picks[0], picks[1], picks[2], picks[3], picks[4])
	return figs
}

// subStages split claim_to_start (the claim's time, attempted_at, to the
// handler's start) with the stage probe's marks: pick_wait, until the
// statement that claimed the task asked for a connection (the statements
// of its claim before it); acquire, the wait for the connection;
// statement, until its rows were read (the server's execution, the
// COMMIT's WAL flush and the round trip); claim_rest, until the claim
// reached the fetch loop (its later statements, the other part of a
// claim split in two, the engine's telemetry); handoff, until the fetch
// loop started its attempt (the attempts of the tasks before it);
// schedule, until the attempt's goroutine ran; to_handler, until the
// handler began (a slot, with prefetch; the attempt's telemetry).
var subStages = [...]string{"pick_wait", "acquire", "statement", "claim_rest", "handoff", "schedule", "to_handler"}

// StageFigure is a stage's p50 and p99 over a latency run's tasks.
type StageFigure struct {
	Name     string
	P50, P99 time.Duration
}

func spanPct(pick func(stageSpan) time.Duration, rs []stageSpan) (time.Duration, time.Duration) {
	ds := make([]time.Duration, len(rs))
	for i, r := range rs {
		ds[i] = pick(r)
	}
	slices.Sort(ds)
	return percentile(ds, 0.5), percentile(ds, 0.99)
}

// largestIn counts, of n parts, how many of rows each was the largest of.
func largestIn(rows []stageSpan, n int, part func(stageSpan, int) time.Duration) []int {
	largest := make([]int, n)
	for _, r := range rows {
		best := 0
		for i := range n {
			if part(r, i) > part(r, best) {
				best = i
			}
		}
		largest[best]++
	}
	return largest
}

// stageSpan is a task's stages, from its creation (at: since the run's
// start); with the stage probe (probed), claim_to_start's parts (sub, in
// subStages' order), the kind of the statement that claimed it and how
// many statements its claim ran.
type stageSpan struct {
	at                    time.Duration
	total, enq, wait, clm time.Duration
	probed                bool
	kind                  string
	picks                 int
	sub                   [len(subStages)]time.Duration
}

// writeStages writes every task's stages as CSV (ms since the run's start;
// the probe's columns empty for a task it did not see).
func writeStages(path string, start time.Time, rows []stageSpan) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "# start_unix_ms=%d\ncreated_ms,total_ms,enqueue_ms,wait_ms,claim_ms,pick_kind,claim_statements", start.UnixMilli())
	for _, n := range subStages {
		fmt.Fprintf(f, ",%s_ms", n)
	}
	fmt.Fprintln(f)
	for _, r := range rows {
		fmt.Fprintf(f, "%.3f,%.3f,%.3f,%.3f,%.3f", msf(r.at), msf(r.total), msf(r.enq), msf(r.wait), msf(r.clm))
		if !r.probed {
			fmt.Fprintln(f, strings.Repeat(",", 2+len(subStages)))
			continue
		}
		fmt.Fprintf(f, ",%s,%d", r.kind, r.picks)
		for _, d := range r.sub {
			fmt.Fprintf(f, ",%.3f", msf(d))
		}
		fmt.Fprintln(f)
	}
	return f.Close()
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
