package ingest_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/backstophq/backstop/internal/ingest"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
)

// The ingester counts by queue the messages ingested, their redeliveries
// (duplicate) and the refused ones (by reason), and gauges its lag: the
// messages of the broker it has not read yet.
func TestIngestMetrics(t *testing.T) {
	ctx := context.Background()
	c := client(t, testdb.SQLite(t))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	in, err := ingest.New(ingest.Config{Enqueuer: c, Mapping: mapping(t), MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	msgs := []*ingest.Message{
		{Value: []byte(`{"check":{"id":"a","subscription":"s","minute":1}}`), Position: ingest.Position{Broker: "kafka", Topic: "t", Offset: 1}},
		{Value: []byte(`{"check":{"id":"b","subscription":"s","minute":2}}`), Position: ingest.Position{Broker: "kafka", Topic: "t", Offset: 2}},
		{Value: []byte(`nope`), Position: ingest.Position{Broker: "kafka", Topic: "t", Offset: 3}},
	}
	if _, err := in.Ingest(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Ingest(ctx, msgs[:1]); err != nil {
		t.Fatal(err)
	}
	in.SetLag(0, 5)
	in.SetLag(1, 7)
	var rm metricdata.ResourceMetrics
	testwait.For(t, "metrics collected", func() bool { return reader.Collect(ctx, &rm) == nil })
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					name := m.Name
					if r, ok := dp.Attributes.Value("reason"); ok {
						name += "." + r.AsString()
					}
					if q, _ := dp.Attributes.Value("queue"); q.AsString() == orderedQueue {
						got[name] += dp.Value
					}
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					got[m.Name] += dp.Value
				}
			}
		}
	}
	want := map[string]int64{"backstop.ingest.messages.ingested": 2, "backstop.ingest.messages.duplicate": 1,
		"backstop.ingest.messages.refused.not_json": 1, "backstop.ingest.lag": 12}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}
