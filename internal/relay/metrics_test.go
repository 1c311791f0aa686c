package relay_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/relay"
)

// The relay counts by sink: messages published, failed attempts, and
// messages dead-lettered.
func TestSinkMetrics(t *testing.T) {
	ctx := context.Background()
	c := client(t, "sqlite://"+t.TempDir()+"/b.db", nil)
	ids := map[string]string{}
	for _, topic := range []string{"ok", "flaky", "refused"} {
		rs, err := c.Publish(ctx, backstop.Message{Sink: "hook", Topic: topic, Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		ids[rs[0].Task.ID] = topic
	}
	_, srv := newHook(t, func(id string, call int) int {
		switch {
		case ids[id] == "refused":
			return 422
		case ids[id] == "flaky" && call == 1:
			return 500
		}
		return 204
	})
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	startRelayWith(t, c, relay.Config{MeterProvider: mp, Sinks: map[string]relay.Sink{"hook": openSink(t, "hook", srv.URL, relay.Options{})}})
	for id, topic := range ids {
		want := backstop.StateSucceeded
		if topic == "refused" {
			want = backstop.StateDead
		}
		waitState(t, c, id, want)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range sum.DataPoints {
					if v, _ := dp.Attributes.Value("sink"); v.AsString() == "hook" {
						got[m.Name] += dp.Value
					}
				}
			}
		}
	}
	want := map[string]int64{"backstop.sink.messages.published": 2, "backstop.sink.messages.failed": 2, "backstop.sink.messages.dead_lettered": 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}
