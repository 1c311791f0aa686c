package backstop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/testmetric"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store/pgstore"
	"github.com/backstophq/backstop/store/sqlitestore"
	"github.com/backstophq/backstop/workflow"
)

const sinkStepYAML = `
name: %s
queue: wf
steps:
  - id: a
    kind: make
    sink: %s
    on_sink_fail: continue
  - id: b
    kind: next
    needs: [a]
`

// execSQL runs stmt on the client's own database.
func execSQL(t *testing.T, c *Client, stmt string) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch s := c.Store().(type) {
	case *pgstore.Store:
		_, err = s.Pool().Exec(ctx, stmt)
	case *sqlitestore.Store:
		_, err = s.DB().ExecContext(ctx, stmt)
	default:
		err = errors.New("unknown store")
	}
	if err != nil {
		t.Fatal(err)
	}
}

// A step with a sink publishes its result as a message task on the sink's
// queue in the transaction that settles it: the message carries the result,
// the default topic and key, and the step's attributes; when that
// transaction rolls back (here: the database refuses the message's row),
// the step is not settled and nothing is published.
func TestWorkflowSinkStepPublishesInSettle(t *testing.T) {
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
		ctx := context.Background()
		applyYAML(t, c, fmt.Sprintf(sinkStepYAML, "ship", "bus"))
		applyYAML(t, c, fmt.Sprintf(sinkStepYAML, "boomwf", "boom"))
		if _, ok := c.Store().(*pgstore.Store); ok {
			execSQL(t, c, `CREATE FUNCTION boom_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'sink boom refused'; END $$`)
			execSQL(t, c, `CREATE TRIGGER boom_refuse BEFORE INSERT ON backstop_tasks FOR EACH ROW WHEN (NEW.queue = 'sink.boom') EXECUTE FUNCTION boom_refuse()`)
		} else {
			execSQL(t, c, `CREATE TRIGGER boom_refuse BEFORE INSERT ON backstop_tasks WHEN NEW.queue = 'sink.boom' BEGIN SELECT RAISE(ABORT, 'sink boom refused'); END`)
		}
		var made atomic.Int32
		startWorker(t, c, map[string]Handler{
			"make": Step(func(ctx context.Context, s StepInput[json.RawMessage]) (map[string]int, error) {
				made.Add(1)
				return map[string]int{"v": 1}, nil
			}),
			"next": Step(func(ctx context.Context, s StepInput[json.RawMessage]) (string, error) { return "ok", nil }),
		})

		run, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "ship"})
		if err != nil {
			t.Fatal(err)
		}
		waitRun(t, c, run.RunID, workflow.RunSucceeded)
		msgs, err := c.List(ctx, ListParams{Queue: SinkQueue("bus")})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 1 {
			t.Fatalf("%d messages on sink.bus, want 1", len(msgs))
		}
		m := msgs[0]
		var body Message
		if err := json.Unmarshal(m.Payload, &body); err != nil {
			t.Fatal(err)
		}
		if m.Kind != MessageKind || body.Topic != "ship.a" || body.Key != run.RunID || string(body.Payload) != `{"v":1}` {
			t.Errorf("message %s %s, want topic ship.a, key the run id, payload the result", m.Kind, m.Payload)
		}
		if a := m.Attributes; a["run_id"] != run.RunID || a["workflow"] != "ship" || a["step_id"] != "a" || a["plan_hash"] == "" {
			t.Errorf("attributes %v", a)
		}
		if full, err := c.Get(ctx, m.ID); err != nil || full.OrderingKey != run.RunID {
			t.Errorf("ordering key %q (%v), want the run id", full.OrderingKey, err)
		}

		// The settle transaction fails: the step stays unsettled, nothing
		// is published, the next step is not enqueued.
		before := made.Load()
		boom, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "boomwf"})
		if err != nil {
			t.Fatal(err)
		}
		testwait.For(t, "the boom step's handler to run", func() bool { return made.Load() > before })
		time.Sleep(2 * time.Second) // the worker's settle tries (5, backing off from 50ms) fail meanwhile
		if ts, err := c.List(ctx, ListParams{Queue: SinkQueue("boom")}); err != nil || len(ts) != 0 {
			t.Fatalf("sink.boom holds %d messages (%v), want none", len(ts), err)
		}
		task, err := c.Get(ctx, boom.RunID+".a")
		if err != nil {
			t.Fatal(err)
		}
		if task.State == StateSucceeded {
			t.Fatalf("the step's task is %s although its settle rolled back", task.State)
		}
		if _, err := c.Get(ctx, boom.RunID+".b"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("the next step's task exists (%v)", err)
		}
		r, err := c.WorkflowRun(ctx, boom.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if s := stepOf(r, "a"); s.State != workflow.StepPending {
			t.Errorf("step a is %s, want pending", s.State)
		}
		// Counted once committed: the rolled-back message is not.
		got := testmetric.Collect(t, reader)["backstop.workflow.sink.messages"]
		if want := map[string]int64{"sink=bus,step=a,workflow=ship": 1}; !equalCounts(got, want) || len(got) != 1 {
			t.Errorf("backstop.workflow.sink.messages = %v, want %v", got, want)
		}
	})
}

// A step's message carries the run's trace context, so the relay's
// delivery spans are in the run's trace.
func TestWorkflowSinkStepTraceContext(t *testing.T) {
	t.Parallel()
	tracedClients(t, nil, func(t *testing.T, c *Client, sr *tracetest.SpanRecorder) {
		ctx := context.Background()
		applyYAML(t, c, fmt.Sprintf(sinkStepYAML, "traced", "bus"))
		startWorker(t, c, map[string]Handler{"make": okHandler(), "next": okHandler()})
		run, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "traced"})
		if err != nil {
			t.Fatal(err)
		}
		waitRun(t, c, run.RunID, workflow.RunSucceeded)
		msgs, err := c.List(ctx, ListParams{Queue: SinkQueue("bus")})
		if err != nil || len(msgs) != 1 {
			t.Fatalf("%d messages (%v), want 1", len(msgs), err)
		}
		m, err := c.Get(ctx, msgs[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		want := engine.RunSpanContext(run.RunID)
		if !strings.HasPrefix(m.TraceParent, "00-"+want.TraceID().String()+"-") {
			t.Errorf("the message's traceparent %q is not in the run's trace %s", m.TraceParent, want.TraceID())
		}
	})
}
