package backstop

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/backstophq/backstop/internal/testmetric"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/workflow"
)

// Seed 003's workflow metrics in Backstop's naming, counted from committed
// plans: steps called and parked, when evaluations by result, routes,
// fan-out items by outcome, run duration.

const metricsYAML = `
name: m
queue: wf
steps:
  - {id: a, kind: ok}
  - {id: fan, kind: item, needs: [a], for_each: input.items, concurrency: 1}
  - {id: maybe, kind: ok, needs: [a], when: input.go == true}
  - {id: broken, kind: ok, when: input.nope.x == 1, on_when_error: treat_as_false}
  - {id: risky, kind: risky, on_failure: "route:rescue"}
  - {id: rescue, kind: ok}
`

func TestWorkflowMetrics(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	readers := map[any]*sdkmetric.ManualReader{}
	forEachStoreClient(t, func() *Config {
		r := sdkmetric.NewManualReader()
		cfg := &Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))}
		mu.Lock()
		readers[cfg.MeterProvider] = r
		mu.Unlock()
		return cfg
	}, func(t *testing.T, c *Client) {
		mu.Lock()
		reader := readers[c.cfg.MeterProvider]
		mu.Unlock()
		applyYAML(t, c, metricsYAML)
		item := HandlerFunc(func(ctx context.Context, tk *Task) error {
			var p struct{ Item int }
			_ = json.Unmarshal(tk.Payload, &p)
			if p.Item < 0 {
				return Permanent(errors.New("negative item"))
			}
			return nil
		})
		risky := HandlerFunc(func(ctx context.Context, tk *Task) error {
			var p struct{ Input struct{ Fail bool } }
			_ = json.Unmarshal(tk.Payload, &p)
			if p.Input.Fail {
				return Permanent(errors.New("risky failed"))
			}
			return nil
		})
		startWorker(t, c, map[string]Handler{"ok": okHandler(), "item": item, "risky": risky})
		ctx := context.Background()
		for _, in := range []string{`{"items":[1,2,3],"go":true,"fail":true}`, `{"items":[1,-1,2],"go":false}`} {
			run, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "m", Input: json.RawMessage(in)})
			if err != nil {
				t.Fatal(err)
			}
			waitRun(t, c, run.RunID, workflow.RunSucceeded, workflow.RunPartial, workflow.RunFailed)
		}
		// A settle records its metrics once its transaction commits, so a
		// run's end can be read before them: wait for both runs' durations and the failed item.
		var got map[string]map[string]int64
		testwait.For(t, "both runs' metrics", func() bool {
			got = testmetric.Collect(t, reader)
			var runs int64
			for _, n := range got["backstop.workflow.run.duration"] {
				runs += n
			}
			return runs >= 2 && got["backstop.workflow.fanout.items.finished"]["outcome=failed,step=fan,workflow=m"] >= 1
		})
		want := map[string]map[string]int64{
			// Run 1: maybe's when holds, risky fails and routes to rescue;
			// run 2: maybe's when is false, risky succeeds (rescue is not
			// routed to), fan's item -1 fails and the run halts.
			"backstop.workflow.when.evaluations": {
				"result=true,step=maybe,workflow=m": 1, "result=false,step=maybe,workflow=m": 1,
				"result=error,step=broken,workflow=m": 2,
			},
			"backstop.workflow.when.errors": {"step=broken,workflow=m": 2},
			"backstop.workflow.routes": {
				"result=taken,step=risky,workflow=m": 1, "result=not_taken,step=risky,workflow=m": 1,
			},
		}
		for name, w := range want {
			if !equalCounts(got[name], w) {
				t.Errorf("%s = %v, want %v", name, got[name], w)
			}
		}
		called := got["backstop.workflow.steps.called"]
		if called["step=a,workflow=m"] != 2 || called["step=rescue,workflow=m"] != 1 || called["step=risky,workflow=m"] != 2 || called["step=fan,workflow=m"] < 5 {
			t.Errorf("steps called %v", called)
		}
		parked := got["backstop.workflow.steps.parked"]
		// fan and maybe wait on a, rescue on risky, in both runs; fan's
		// items 1 and 2 wait for its concurrency of 1.
		if parked["reason=needs,step=fan,workflow=m"] != 2 || parked["reason=needs,step=maybe,workflow=m"] != 2 ||
			parked["reason=needs,step=rescue,workflow=m"] != 2 || parked["reason=concurrency,step=fan,workflow=m"] != 4 ||
			parked["reason=needs,step=a,workflow=m"] != 0 {
			t.Errorf("steps parked %v", parked)
		}
		items := got["backstop.workflow.fanout.items.finished"]
		if items["outcome=succeeded,step=fan,workflow=m"] < 4 || items["outcome=failed,step=fan,workflow=m"] != 1 {
			t.Errorf("fan-out items finished %v", items)
		}
		var runs int64
		for _, n := range got["backstop.workflow.run.duration"] {
			runs += n
		}
		if runs != 2 {
			t.Errorf("run durations %v, want 2 runs", got["backstop.workflow.run.duration"])
		}
	})
}

func equalCounts(got, want map[string]int64) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	for k, v := range got {
		if want[k] != v {
			return false
		}
	}
	return true
}
