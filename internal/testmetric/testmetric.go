// Package testmetric reads what an OpenTelemetry manual reader collected,
// for tests that check the metrics a workload recorded: sums and histogram
// counts by metric name and label set, compared exactly.
package testmetric

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Collect sums reader's data points by metric name and label set (rendered
// "k=v,k=v" in key order): a counter's values, a histogram's counts, an
// integer gauge's value.
func Collect(t testing.TB, reader *sdkmetric.ManualReader) map[string]map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			vals := map[string]int64{}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					vals[Labels(p.Attributes)] += p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					vals[Labels(p.Attributes)] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					vals[Labels(p.Attributes)] += int64(p.Count)
				}
			}
			out[m.Name] = vals
		}
	}
	return out
}

// Labels renders a label set as "k=v,k=v" in key order.
func Labels(s attribute.Set) string {
	parts := make([]string, 0, s.Len())
	for _, kv := range s.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.Emit())
	}
	return strings.Join(parts, ",")
}

// Expect checks exact values: for each metric of want, every series want
// names has its value and no other series was recorded (what a workload
// must have recorded from zero).
func Expect(t testing.TB, got, want map[string]map[string]int64) {
	t.Helper()
	for name, series := range want {
		for l, v := range series {
			if g := got[name][l]; g != v {
				t.Errorf("%s{%s} = %d, want %d (all: %v)", name, l, g, v, got[name])
			}
		}
		for l, g := range got[name] {
			if _, ok := series[l]; !ok {
				t.Errorf("%s{%s} = %d, not expected", name, l, g)
			}
		}
	}
}
