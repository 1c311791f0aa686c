package engine

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testmetric"
	"github.com/backstophq/backstop/store"
)

// Counters are added once per run of equal labels in a batch: the totals
// per label set are those of one Add per task, whatever the mix and order
// of labels in the batch.
func TestTelemetryBatchCountsPerLabelRun(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	tel, err := newTelemetry(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), noop.NewTracerProvider(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mk := func(q, k string) *Task { return &Task{ID: q + k, Queue: q, Kind: k} }
	// enqueue: k, k, k2, (q2) k, k again, a duplicate (not counted), merged k
	rs := []EnqueueResult{{Task: mk("q", "k")}, {Task: mk("q", "k")}, {Task: mk("q", "k2")}, {Task: mk("q2", "k")},
		{Task: mk("q", "k")}, {Task: mk("q", "k"), Duplicate: true}, {Task: mk("q", "k"), Merged: true}, {}}
	tel.EndSend(ctx, nil, rs, nil)
	// a claim round of q: k, k2, k, k
	claimed := []*Task{mk("q", "k"), mk("q", "k2"), mk("q", "k"), mk("q", "k")}
	tel.claimed(ctx, "q", claimed, nil, time.Now())
	// a settle batch: three successes of k, one failure of k, one success
	// of k2, one that did not apply (not counted), one success of k
	now := time.Now()
	type item struct {
		tk *Task
		s  store.Settlement
	}
	mkItem := func(k string, o bt.Outcome, st bt.State) item {
		return item{tk: mk("q", k), s: store.Settlement{Outcome: o, State: st, FinishedAt: now}}
	}
	items := []item{mkItem("k", bt.OutcomeSucceeded, bt.StateSucceeded), mkItem("k", bt.OutcomeSucceeded, bt.StateSucceeded),
		mkItem("k", bt.OutcomeTransientError, bt.StateScheduled), mkItem("k2", bt.OutcomeSucceeded, bt.StateSucceeded),
		mkItem("k", bt.OutcomeSucceeded, bt.StateSucceeded), mkItem("k", bt.OutcomeSucceeded, bt.StateSucceeded),
		mkItem("k", bt.OutcomeSucceeded, bt.StateSucceeded)}
	tel.SettledBatch(len(items), func(i int) (*Task, trace.Span, time.Time, *store.Settlement) {
		return items[i].tk, nil, now, &items[i].s
	}, []bool{true, true, true, true, false, true})

	testmetric.Expect(t, testmetric.Collect(t, reader), map[string]map[string]int64{
		"backstop.tasks.enqueued": {"kind=k,merged=false,queue=q": 3, "kind=k2,merged=false,queue=q": 1,
			"kind=k,merged=false,queue=q2": 1, "kind=k,merged=true,queue=q": 1},
		"messaging.client.sent.messages": {
			"messaging.destination.name=q,messaging.operation.name=send,messaging.system=backstop":  5,
			"messaging.destination.name=q2,messaging.operation.name=send,messaging.system=backstop": 1},
		"messaging.client.consumed.messages": {
			"messaging.destination.name=q,messaging.operation.name=receive,messaging.system=backstop": 4},
		"backstop.queue.wait": {"kind=k,queue=q": 3, "kind=k2,queue=q": 1},
		"backstop.attempts": {"kind=k,outcome=succeeded,queue=q": 3, "kind=k,outcome=transient_error,queue=q": 1,
			"kind=k2,outcome=succeeded,queue=q": 1},
		"backstop.task.duration": {"kind=k,outcome=succeeded,queue=q": 3, "kind=k,outcome=transient_error,queue=q": 1,
			"kind=k2,outcome=succeeded,queue=q": 1},
		"backstop.retries": {"kind=k,queue=q": 1},
	})
}
