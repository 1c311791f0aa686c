package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/config"
	"github.com/backstophq/backstop/internal/ingest"
	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/internal/relay"
	"github.com/backstophq/backstop/internal/telemetry"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlitestore"
	"github.com/backstophq/backstop/workflow"
)

var (
	scrapeOnce sync.Once
	scrapeText string
	scrapeErr  error
)

// scrape runs a real workload on a real SQLite file — successes, a retry,
// a dead letter, a replay, a discard, a canceled task — with the binary's
// telemetry setup, and returns the Prometheus exposition of its /metrics.
func scrape(t *testing.T) string {
	t.Helper()
	scrapeOnce.Do(func() {
		// A wait that times out ends the first scraping test (runtime.Goexit
		// skips the assignment below), so the others fail with this error.
		scrapeErr = errors.New("the workload failed in the first test that scraped")
		scrapeText, scrapeErr = runWorkload(t)
	})
	if scrapeErr != nil {
		t.Fatal(scrapeErr)
	}
	return scrapeText
}

func runWorkload(t testing.TB) (string, error) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "backstop-deploy-test")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	tel, err := telemetry.Setup(ctx, telemetry.Options{LogOutput: io.Discard, Getenv: func(string) string { return "" }})
	if err != nil {
		return "", err
	}
	defer tel.Shutdown(ctx)
	s, err := sqlitestore.Open(filepath.Join(dir, "backstop.db"))
	if err != nil {
		return "", err
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		return "", err
	}
	// q: plain work; ord: ordered (default circuit breaker, 10); plans: a
	// complexity policy.
	c, err := backstop.NewClient(s, &backstop.Config{MeterProvider: tel.MeterProvider, TracerProvider: tel.TracerProvider,
		Logger: tel.Logger, Retry: &backstop.RetryPolicy{Schedule: []bt.Duration{0}},
		Queues: map[string]backstop.QueueConfig{
			"ord":   {Ordering: backstop.OrderingConfig{Enabled: true, Step: 1}},
			"plans": {Complexity: backstop.ComplexityPolicy{MaxComplexity: 10}},
		}})
	if err != nil {
		return "", err
	}
	w, err := backstop.NewWorker(c, &backstop.WorkerConfig{Queues: map[string]int{"q": 4, "ord": 1, "plans": 1},
		PollInterval: 20 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		return "", err
	}
	started := make(chan struct{}, 1)
	w.HandleDefault(backstop.HandlerFunc(func(ctx context.Context, tk *backstop.Task) error {
		switch tk.Kind {
		case "flaky":
			if tk.Attempt == 1 {
				return errors.New("flaky")
			}
		case "bad":
			return backstop.Permanent(errors.New("bad"))
		case "slow":
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}))
	if err := w.Start(ctx); err != nil {
		return "", err
	}
	defer w.Stop(ctx)
	ids := map[string]bt.State{}
	enqueue := func(p backstop.EnqueueParams, want bt.State) (string, error) {
		r, err := c.Enqueue(ctx, p)
		if err != nil {
			return "", err
		}
		ids[r.Task.ID] = want
		return r.Task.ID, nil
	}
	for _, k := range []string{"ok", "ok", "flaky", "bad", "bad"} {
		if _, err := enqueue(backstop.EnqueueParams{Queue: "q", Kind: k},
			map[string]bt.State{"ok": bt.StateSucceeded, "flaky": bt.StateSucceeded, "bad": bt.StateDead}[k]); err != nil {
			return "", err
		}
	}
	idem, err := enqueue(backstop.EnqueueParams{Queue: "q", Kind: "bad", IdempotencyKey: "idem-1"}, bt.StateDead)
	if err != nil {
		return "", err
	}
	// One attempt only, failing: dead letter of reason attempts_exhausted.
	if _, err := enqueue(backstop.EnqueueParams{Queue: "q", Kind: "flaky", MaxAttempts: 1}, bt.StateDead); err != nil {
		return "", err
	}
	// Too-complex tasks (complexity 50 > 10): counted; one runs, one
	// dead-letters (too_complex="true" on the dead-letter counter).
	if _, err := enqueue(backstop.EnqueueParams{Queue: "plans", Kind: "plan", Complexity: 50}, bt.StateSucceeded); err != nil {
		return "", err
	}
	if _, err := enqueue(backstop.EnqueueParams{Queue: "plans", Kind: "bad", Complexity: 50}, bt.StateDead); err != nil {
		return "", err
	}
	// Ordering: key k misses sequence 2, so 3..12 buffer behind the gap
	// and the 10th trips the circuit breaker (all released and run); key
	// k2 misses 2 and its 3 stays buffered.
	ordered := []struct {
		key  string
		seq  int64
		want bt.State
	}{{"k", 1, bt.StateSucceeded}, {"k2", 1, bt.StateSucceeded}}
	for seq := int64(3); seq <= 12; seq++ {
		ordered = append(ordered, struct {
			key  string
			seq  int64
			want bt.State
		}{"k", seq, bt.StateSucceeded})
	}
	for _, o := range ordered {
		if _, err := enqueue(backstop.EnqueueParams{Queue: "ord", Kind: "result", OrderingKey: o.key, Sequence: o.seq}, o.want); err != nil {
			return "", err
		}
	}
	slow, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "q", Kind: "slow"})
	if err != nil {
		return "", err
	}
	<-started
	if _, err := c.Cancel(ctx, slow.Task.ID); err != nil {
		return "", err
	}
	ids[slow.Task.ID] = bt.StateCanceled
	waitStates(ctx, t, c, ids)
	// k2's sequence 3 waits behind its gap (ordered after k2's 1 ran).
	if _, err := enqueue(backstop.EnqueueParams{Queue: "ord", Kind: "result", OrderingKey: "k2", Sequence: 3}, bt.StateBuffered); err != nil {
		return "", err
	}
	waitStates(ctx, t, c, ids)
	var dead []string // the two permanent failures of queue q
	for id, want := range ids {
		if want == bt.StateDead && id != idem {
			if tk, err := c.Get(ctx, id); err != nil {
				return "", err
			} else if tk.Queue == "q" && tk.Kind == "bad" {
				dead = append(dead, id)
			}
		}
	}
	if _, err := c.Replay(ctx, backstop.ReplayParams{ID: dead[0], Delay: time.Hour}); err != nil {
		return "", err
	}
	if _, err := c.Discard(ctx, backstop.DiscardParams{ID: dead[1], Reason: "test"}); err != nil {
		return "", err
	}
	// A live task holding the dead letter's idempotency key: its replay
	// conflicts (backstop_replays_total{result="conflict"}).
	if _, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "hold", Kind: "ok", IdempotencyKey: "idem-1"}); err != nil {
		return "", err
	}
	if _, err := c.Replay(ctx, backstop.ReplayParams{ID: idem}); !errors.Is(err, backstop.ErrConflict) {
		return "", fmt.Errorf("replay over a held idempotency key: %v, want a conflict", err)
	}
	// Workflows: one succeeds (with a fan-out), one halts (rollback
	// manual: failed), one compensates, one's compensation dead-letters
	// (compensation_failed).
	if err := workflowRuns(ctx, t, c); err != nil {
		return "", err
	}
	if err := w.Stop(ctx); err != nil {
		return "", err
	}
	// A workflow run past its SLA and its step's, noticed by the run
	// wake-ups service while the step waits (no worker runs now).
	if err := slaMissedRun(ctx, t, c); err != nil {
		return "", err
	}
	// A running attempt and a pending task for the lease and pending-age
	// gauges, read by the store gauges (one query, then cached).
	if _, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "q", Kind: "ok"}); err != nil {
		return "", err
	}
	if _, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "q", Kind: "ok"}); err != nil {
		return "", err
	}
	if _, err := s.Claim(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Max: 1, Now: time.Now(), Lease: time.Minute}); err != nil {
		return "", err
	}
	// A live worker for the per-worker heartbeat gauge.
	idle, err := backstop.NewWorker(c, &backstop.WorkerConfig{Queues: map[string]int{"idle": 1}, PollInterval: time.Second})
	if err != nil {
		return "", err
	}
	idle.HandleDefault(backstop.HandlerFunc(func(context.Context, *backstop.Task) error { return nil }))
	if err := idle.Start(ctx); err != nil {
		return "", err
	}
	defer idle.Stop(ctx)
	// A periodic schedule whose first tick a schedules round enqueues
	// (backstop_schedule_ticks_total and the schedule gauges).
	if _, err := c.AddSchedule(ctx, backstop.ScheduleParams{Name: "hb", Every: time.Second, Queue: "sched", Kind: "ping"}); err != nil {
		return "", err
	}
	rounds := maintenance.NewSchedules(c.Engine(), time.Second)
	testwait.For(t, "schedule hb to enqueue its first tick", func() bool {
		in, err := c.Schedule(ctx, "hb")
		return rounds.RunOnce(ctx) == nil && err == nil && in.LastOutcome == "enqueued"
	})
	// An outbox message no relay delivers and an event-log checkpoint
	// behind (the sink and relay gauges).
	if _, err := c.Publish(ctx, backstop.Message{Sink: "bus", Topic: "t", Payload: []byte(`{}`)}); err != nil {
		return "", err
	}
	if err := s.SaveRelayCheckpoint(ctx, store.RelayCheckpointUpdate{Name: "feed", Stream: "all", Sink: "bus", Now: time.Now()}); err != nil {
		return "", err
	}
	// An ingester reading a topic (the ingest lag gauges).
	in, err := ingest.New(ingest.Config{Enqueuer: c, Mapping: ingest.Mapping{Queue: "results", Kind: "check"},
		MeterProvider: tel.MeterProvider, Logger: tel.Logger})
	if err != nil {
		return "", err
	}
	defer in.Close()
	in.SetSource("backstop-ingest-results", "uptime")
	// As serve does (internal/cli startGauges), with the default policy.
	gr := telemetry.WithDLQPolicy(telemetry.WithSchedules(telemetry.WithWorkerHeartbeats(telemetry.WithWorkers(s, c.WorkerCounts),
		c.HeartbeatingWorkers), s.ListSchedules), (&config.Config{}).DLQGaugePolicy())
	gr = telemetry.WithRelayCheckpoints(gr, func(ctx context.Context) ([]store.RelayCheckpointGauge, error) {
		return relay.CheckpointGauges(ctx, c)
	})
	g, err := telemetry.StartStoreGauges(ctx, tel.MeterProvider, gr, time.Hour, nil, tel.Logger)
	if err != nil {
		return "", err
	}
	defer g.Stop()
	if g.Snapshot() == nil {
		return "", errors.New("store gauges: no snapshot after the first read")
	}
	srv := httptest.NewServer(tel.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// workflowRuns runs four workflows on queue q (kinds ok and bad, as the
// workload's handler treats them) to the end states the workflow metrics
// and alerts label.
func workflowRuns(ctx context.Context, t testing.TB, c *backstop.Client) error {
	want := map[string]store.RunState{}
	for name, src := range map[string]string{
		// wf_ok also evaluates whens (true, false, error), decides
		// routes (taken, not taken) and parks steps (needs, concurrency).
		"wf_ok": "name: wf_ok\nqueue: q\nsteps:\n  - {id: a, kind: ok}\n  - {id: b, kind: ok, needs: [a], for_each: input.items, concurrency: 1}\n" +
			"  - {id: w, kind: ok, needs: [a], when: size(input.items) == 2}\n  - {id: n, kind: ok, when: size(input.items) > 5}\n" +
			"  - {id: e, kind: ok, when: input.nope == 1, on_when_error: treat_as_false}\n" +
			"  - {id: x, kind: bad, on_failure: \"route:y\"}\n  - {id: y, kind: ok}\n" +
			"  - {id: z, kind: ok, needs: [a], on_failure: \"route:zr\"}\n  - {id: zr, kind: ok}\n",
		"wf_halt":   "name: wf_halt\nqueue: q\nsteps:\n  - {id: a, kind: ok}\n  - {id: b, kind: bad, needs: [a]}\n",
		"wf_saga":   "name: wf_saga\nqueue: q\nrollback: on_fail\nsteps:\n  - {id: a, kind: ok, compensate: undo}\n  - {id: b, kind: bad, needs: [a]}\n  - {id: undo, kind: ok, compensation: true}\n",
		"wf_undone": "name: wf_undone\nqueue: q\nrollback: on_fail\nsteps:\n  - {id: a, kind: ok, compensate: undo}\n  - {id: b, kind: bad, needs: [a]}\n  - {id: undo, kind: bad, compensation: true}\n",
	} {
		def, err := workflow.Parse([]byte(src))
		if err != nil {
			return err
		}
		if _, _, err := c.ApplyWorkflow(ctx, def); err != nil {
			return err
		}
		r, err := c.RunWorkflow(ctx, backstop.RunWorkflowParams{Workflow: name, Input: []byte(`{"items":[1,2]}`)})
		if err != nil {
			return err
		}
		want[r.RunID] = map[string]store.RunState{"wf_ok": workflow.RunSucceeded, "wf_halt": workflow.RunFailed,
			"wf_saga": workflow.RunCompensated, "wf_undone": workflow.RunCompensationFailed}[name]
	}
	for id, st := range want {
		testwait.For(t, fmt.Sprintf("workflow run %s to end %s", id, st), func() bool {
			r, err := c.WorkflowRun(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			return r.State == st
		})
	}
	return nil
}

// slaMissedRun starts a run whose SLA and first step's are 1ms and runs
// the run wake-ups service until it recorded both misses
// (backstop_workflow_{runs,steps}_sla_missed_total).
func slaMissedRun(ctx context.Context, t testing.TB, c *backstop.Client) error {
	def, err := workflow.Parse([]byte("name: wf_sla\nqueue: q\nsla: 1ms\nsteps:\n  - {id: a, kind: ok, sla: 1ms}\n"))
	if err != nil {
		return err
	}
	if _, _, err := c.ApplyWorkflow(ctx, def); err != nil {
		return err
	}
	r, err := c.RunWorkflow(ctx, backstop.RunWorkflowParams{Workflow: "wf_sla", Input: []byte(`{}`)})
	if err != nil {
		return err
	}
	wakeups := maintenance.NewRunWakeups(c.Engine(), time.Second)
	testwait.For(t, "run wf_sla to miss its SLAs", func() bool {
		if err := wakeups.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		page, err := c.ReadEvents(ctx, backstop.ReadEventsParams{Stream: "run." + r.RunID, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, e := range page.Events {
			seen[e.Type] = true
		}
		return seen[workflow.EventRunSLAMissed] && seen[workflow.EventStepSLAMissed]
	})
	return nil
}

// waitStates waits until every task of ids is in its state.
func waitStates(ctx context.Context, t testing.TB, c *backstop.Client, ids map[string]bt.State) {
	t.Helper()
	for id, want := range ids {
		testwait.For(t, fmt.Sprintf("task %s to be %s", id, want), func() bool {
			tk, err := c.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			return tk.State == want
		})
	}
}

// promtool finds promtool; tests that need it fail when
// BACKSTOP_REQUIRE_PROMTOOL=1 (CI) and skip otherwise.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("BACKSTOP_REQUIRE_PROMTOOL") == "1" {
			t.Fatal("promtool not found and BACKSTOP_REQUIRE_PROMTOOL=1 (apt-get install prometheus)")
		}
		t.Skip("promtool not found (apt-get install prometheus); set BACKSTOP_REQUIRE_PROMTOOL=1 to fail instead")
	}
	return p
}

// TestScrapePassesPromtool: a real /metrics scrape after a real workload
// passes `promtool check metrics` with no warning at all.
func TestScrapePassesPromtool(t *testing.T) {
	text := scrape(t)
	cmd := exec.Command(promtool(t), "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s\n--- scrape:\n%s", err, out, text)
	}
}

func TestPrintScrape(t *testing.T) {
	if os.Getenv("PRINT_SCRAPE") == "" {
		t.Skip()
	}
	t.Log(scrape(t))
}
