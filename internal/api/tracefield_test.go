package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/telemetry"
)

// TestTraceField: "trace": true in POST /v1/workflows/{name}/runs and
// POST /v1/tasks samples the run's (the task's) spans at a sampling ratio
// of 0; without it nothing is sampled; a trace that is not a boolean is 400.
func TestTraceField(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		sr := tracetest.NewSpanRecorder()
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1, lib: &backstop.Config{TracerProvider: sdktrace.NewTracerProvider(
			sdktrace.WithSampler(telemetry.Sampler(0)), sdktrace.WithSpanProcessor(telemetry.ErrorKeeping(sr)),
			sdktrace.WithIDGenerator(backstop.TraceIDGenerator()))}})
		if st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/workflows", "application/yaml", "name: t\nqueue: tq\nsteps:\n  - {id: a, kind: k}\n"); st != http.StatusCreated {
			t.Fatalf("apply: %d %s", st, body)
		}
		for _, c := range []struct{ path, body string }{
			{"/v1/workflows/t/runs", `{"run_id":"quiet"}`},
			{"/v1/workflows/t/runs", `{"run_id":"loud","trace":true}`},
			{"/v1/tasks", `{"id":"quiet-task","queue":"tq","kind":"k"}`},
			{"/v1/tasks", `{"id":"loud-task","queue":"tq","kind":"k","trace":true}`},
		} {
			if st, body := b.raw(t, api.RoleOperator, "POST", c.path, "application/json", c.body); st != http.StatusCreated {
				t.Fatalf("POST %s %s: %d %s", c.path, c.body, st, body)
			}
		}
		got := map[string]bool{}
		for _, s := range sr.Ended() {
			for _, kv := range s.Attributes() {
				if kv.Key == "messaging.message.id" {
					got[s.Name()+" "+kv.Value.AsString()] = true
				}
			}
		}
		if len(got) != 2 || !got["dispatch a loud.a"] || !got["send tq loud-task"] {
			t.Errorf("sampled spans %v, want only the forced run's dispatch and the forced task's send", got)
		}
		// A remote worker's attempt of the forced run's step is in the run's
		// trace (its attempt_traceparent), sampled.
		claimed, err := b.as[api.RoleOperator].Claim(context.Background(), api.ClaimRequest{Queues: []string{"tq"}, WorkerID: "w", Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		runTrace := engine.RunSpanContext("loud").TraceID().String()
		seen := false
		for _, c := range claimed {
			if c.ID == "loud.a" {
				seen = true
				if want := "00-" + runTrace + "-"; !strings.HasPrefix(c.AttemptTraceParent, want) || !strings.HasSuffix(c.AttemptTraceParent, "-01") {
					t.Errorf("attempt_traceparent %q, want a sampled span of trace %s", c.AttemptTraceParent, runTrace)
				}
			}
		}
		if !seen {
			t.Fatalf("loud.a not claimed: %+v", claimed)
		}
		for path, body := range map[string]string{"/v1/workflows/t/runs": `{"trace":"yes"}`, "/v1/tasks": `{"queue":"tq","kind":"k","trace":"yes"}`} {
			st, out := b.raw(t, api.RoleOperator, "POST", path, "application/json", body)
			if st != http.StatusBadRequest || !strings.Contains(string(out), "trace") {
				t.Errorf("POST %s with a string trace: %d %s, want 400 naming trace", path, st, out)
			}
		}
	})
}
