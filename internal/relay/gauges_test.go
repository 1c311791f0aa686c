package relay_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/relay"
	"github.com/backstophq/backstop/internal/telemetry"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testmetric"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// gauges reads the gauges a manual reader collected: name → labels → value.
func gauges(t *testing.T, reader *sdkmetric.ManualReader) map[string]map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			vals := map[string]float64{}
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					vals[testmetric.Labels(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					vals[testmetric.Labels(p.Attributes)] = p.Value
				}
			}
			out[m.Name] = vals
		}
	}
	return out
}

// The relay gauges, as the binary registers them (the store gauges with
// the checkpoints added): a sink's undelivered messages, lag and open dead
// letters; a checkpoint's events behind and the age of the oldest.
func TestRelayGauges(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ctx := context.Background()
		c := client(t, db, nil)
		if _, err := c.Publish(ctx, backstop.Message{Sink: "bus", Topic: "t", Payload: []byte(`1`)},
			backstop.Message{Sink: "bus", Topic: "t", Payload: []byte(`2`)}); err != nil {
			t.Fatal(err)
		}
		enqueueN(t, c, "evq", 3)
		if err := c.Store().SaveRelayCheckpoint(ctx, store.RelayCheckpointUpdate{Name: "feed", Stream: "queue.evq", Sink: "bus", Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		gr := telemetry.WithRelayCheckpoints(c.Store().(store.GaugeReader), func(ctx context.Context) ([]store.RelayCheckpointGauge, error) {
			return relay.CheckpointGauges(ctx, c)
		})
		var g map[string]map[string]float64
		testwait.For(t, "the checkpoint's three events in the gauges", func() bool {
			sg, err := telemetry.StartStoreGauges(ctx, mp, gr, time.Hour, nil, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer sg.Stop()
			g = gauges(t, reader)
			return g["backstop.relay.lag_events"]["checkpoint=feed,sink=bus,stream=queue.evq"] == 3
		})
		if lag := g["backstop.relay.lag"]["checkpoint=feed,sink=bus,stream=queue.evq"]; lag <= 0 {
			t.Errorf("relay lag %v, want > 0", lag)
		}
		if n := g["backstop.sink.pending_messages"]["sink=bus"]; n != 2 {
			t.Errorf("sink pending %v, want 2 (all: %v)", n, g["backstop.sink.pending_messages"])
		}
		if n, ok := g["backstop.sink.dead_messages"]["sink=bus"]; !ok || n != 0 {
			t.Errorf("sink dead %v %v, want 0", n, ok)
		}
		if _, ok := g["backstop.sink.lag"]["sink=bus"]; !ok {
			t.Errorf("no sink lag: %v", g)
		}
	})
}
