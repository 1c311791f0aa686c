package backstop

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/internal/testclock"
	"github.com/backstophq/backstop/internal/testmetric"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/workflow"
)

const slaYAML = `
name: sla
queue: wf
sla: 5m
steps:
  - {id: a, kind: ok, sla: 30s}
  - {id: b, kind: ok, needs: [a]}
`

// TestWorkflowSLAMissed (both stores, frozen clock): the run wake-ups
// service records a step's missed SLA at its deadline while the step is
// still waiting for a worker, and the run's at the run's, each once —
// another wake-up and the run's late end do not record them again — as
// backstop_workflow_{steps,runs}_sla_missed_total and as events of the run.
func TestWorkflowSLAMissed(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	readers := map[any]*sdkmetric.ManualReader{}
	clocks := map[any]*testclock.Clock{}
	forEachStoreClient(t, func() *Config {
		r, clk := sdkmetric.NewManualReader(), testclock.New()
		cfg := &Config{Clock: clk, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))}
		mu.Lock()
		readers[cfg.MeterProvider], clocks[cfg.MeterProvider] = r, clk
		mu.Unlock()
		return cfg
	}, func(t *testing.T, c *Client) {
		mu.Lock()
		reader, clk := readers[c.cfg.MeterProvider], clocks[c.cfg.MeterProvider]
		mu.Unlock()
		ctx := context.Background()
		applyYAML(t, c, slaYAML)
		run, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "sla", Input: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		wakeups := maintenance.NewRunWakeups(c.e, time.Second)
		wake := func() {
			t.Helper()
			if err := wakeups.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// misses reads the counters (counted once the plan committed);
		// the events are read at the end (on Postgres an event is served
		// once every earlier transaction of the cluster ended).
		misses := func() (steps, runs int64) {
			t.Helper()
			got := testmetric.Collect(t, reader)
			for _, v := range got["backstop.workflow.steps.sla_missed"] {
				steps += v
			}
			for _, v := range got["backstop.workflow.runs.sla_missed"] {
				runs += v
			}
			return steps, runs
		}
		events := func() (steps, runs int) {
			t.Helper()
			page, err := c.ReadEvents(ctx, ReadEventsParams{Stream: "run." + run.RunID, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range page.Events {
				switch e.Type {
				case workflow.EventStepSLAMissed:
					steps++
				case workflow.EventRunSLAMissed:
					runs++
				}
			}
			return steps, runs
		}
		counted := func(want map[string]int64) {
			t.Helper()
			got := testmetric.Collect(t, reader)
			for name, n := range want {
				var sum int64
				for _, v := range got[name] {
					sum += v
				}
				if sum != n {
					t.Errorf("%s = %v, want %d", name, got[name], n)
				}
			}
		}
		clk.Advance(29 * time.Second)
		wake()
		if s, r := misses(); s != 0 || r != 0 {
			t.Fatalf("before a's deadline: %d step misses, %d run misses", s, r)
		}
		clk.Advance(time.Second)
		wake()
		wake()
		if s, r := misses(); s != 1 || r != 0 {
			t.Fatalf("at a's deadline: %d step misses, %d run misses; want 1, 0", s, r)
		}
		if got := testmetric.Collect(t, reader)["backstop.workflow.steps.sla_missed"]; got["queue=wf,step=a,workflow=sla"] != 1 {
			t.Errorf("steps sla missed %v, want queue=wf,step=a,workflow=sla", got)
		}
		clk.Advance(5 * time.Minute)
		wake()
		wake()
		if s, r := misses(); s != 1 || r != 1 {
			t.Fatalf("past the run's deadline: %d step misses, %d run misses; want 1, 1", s, r)
		}
		startWorker(t, c, map[string]Handler{"ok": okHandler()})
		waitRun(t, c, run.RunID, workflow.RunSucceeded)
		if s, r := misses(); s != 1 || r != 1 {
			t.Fatalf("after the late end: %d step misses, %d run misses; want 1, 1", s, r)
		}
		// Once run.finished is served, every earlier event of the run is.
		testwait.For(t, "the run's run.finished event", func() bool {
			page, err := c.ReadEvents(ctx, ReadEventsParams{Stream: "run." + run.RunID, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range page.Events {
				if e.Type == workflow.EventRunFinished {
					return true
				}
			}
			return false
		})
		if s, r := events(); s != 1 || r != 1 {
			t.Fatalf("events: %d step.sla_missed, %d run.sla_missed; want 1 each", s, r)
		}
		counted(map[string]int64{"backstop.workflow.steps.sla_missed": 1, "backstop.workflow.runs.sla_missed": 1,
			"backstop.workflow.steps": 2})
	})
}
