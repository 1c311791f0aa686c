package ingest_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/ingest"
	"github.com/backstophq/backstop/internal/telemetry"
	"github.com/backstophq/backstop/internal/testdb"
)

// The metrics' Prometheus names, as /metrics serves them
// (docs/observability.md).
func TestIngestPrometheusNames(t *testing.T) {
	ctx := context.Background()
	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: "test", LogOutput: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)
	c := client(t, testdb.SQLite(t))
	in, err := ingest.New(ingest.Config{Enqueuer: c, Mapping: mapping(t), MeterProvider: tel.MeterProvider, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if _, err := in.Ingest(ctx, []*ingest.Message{{Value: []byte(`x`), Position: ingest.Position{Broker: "nats", Topic: "S", Offset: 1}},
		{Value: []byte(`{"check":{"id":"a","subscription":"s","minute":1}}`), Position: ingest.Position{Broker: "nats", Topic: "S", Offset: 2}}}); err != nil {
		t.Fatal(err)
	}
	in.SetLag(0, 3)
	rec := httptest.NewRecorder()
	tel.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{`backstop_ingest_messages_ingested_total{`, `backstop_ingest_messages_refused_total{`,
		`reason="not_json"`, `backstop_ingest_lag{`, `backstop_ingest_lag_seconds{`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "backstop_ingest") {
			t.Log(l)
		}
	}
}
