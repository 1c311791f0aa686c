package api_test

import (
	"context"
	"log/slog"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/testlog"
)

// TestRemoteAttemptTelemetry drives the worker protocol over a real server
// on loopback: each claimed task's answer carries the traceparent of its
// attempt's server-side span `process <queue>` (a child of, and linked to,
// the task's creation span), which ends with the outcome when the worker
// reports; completions (single and batched) and failures are counted in
// backstop.attempts once each, stale reports not at all; the server's log
// lines about an attempt carry its span's trace_id and span_id.
func TestRemoteAttemptTelemetry(t *testing.T) {
	stores(t, func(t *testing.T, dbURL func(t *testing.T) string) {
		reader := sdkmetric.NewManualReader()
		sr := tracetest.NewSpanRecorder()
		logs := &testlog.Buffer{}
		b := setup(t, dbURL(t), setupOpts{lib: &backstop.Config{
			MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
			TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)),
		}, log: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		ctx := context.Background()
		op := b.as[api.RoleOperator]
		var ids []string
		for range 4 {
			r, err := op.Enqueue(ctx, apiclient.Task{Queue: "tq", Kind: "k", MaxAttempts: 1, Attributes: map[string]string{"run_id": "run-7"}})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.Task.ID)
		}
		claimed, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"tq"}, WorkerID: "w-1", Max: 4})
		if err != nil {
			t.Fatal(err)
		}
		if len(claimed) != 4 {
			t.Fatalf("claimed %d", len(claimed))
		}
		byID := map[string]api.ClaimedTask{}
		for _, c := range claimed {
			byID[c.ID] = c
			if c.AttemptTraceParent == "" {
				t.Fatalf("claim of %s carries no attempt_traceparent", c.ID)
			}
		}
		a, bb, c, d := byID[ids[0]], byID[ids[1]], byID[ids[2]], byID[ids[3]]
		if _, err := op.Complete(ctx, a.ID, api.CompleteRequest{LeaseToken: a.LeaseToken}); err != nil {
			t.Fatal(err)
		}
		if _, err := op.Complete(ctx, a.ID, api.CompleteRequest{LeaseToken: a.LeaseToken}); err == nil {
			t.Fatal("duplicate completion accepted")
		}
		res, err := op.CompleteMany(ctx, []api.CompletionItem{{TaskID: bb.ID, LeaseToken: bb.LeaseToken}, {TaskID: c.ID, LeaseToken: c.LeaseToken}})
		if err != nil || res.Results[0].Problem != nil || res.Results[1].Problem != nil {
			t.Fatalf("batch: %+v %v", res, err)
		}
		if _, err := op.Fail(ctx, d.ID, api.FailRequest{LeaseToken: d.LeaseToken, Outcome: bt.OutcomeTransientError, Error: "boom"}); err != nil {
			t.Fatal(err)
		}

		// Metrics, read from the SDK.
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				switch dd := m.Data.(type) {
				case metricdata.Sum[int64]:
					for _, p := range dd.DataPoints {
						got[m.Name+"{"+attrString(p.Attributes)+"}"] += p.Value
					}
				case metricdata.Histogram[float64]:
					for _, p := range dd.DataPoints {
						got[m.Name+"{"+attrString(p.Attributes)+"}"] += int64(p.Count)
					}
				}
			}
		}
		for k, v := range map[string]int64{
			"backstop.attempts{kind=k,outcome=succeeded,queue=tq}":                               3,
			"backstop.attempts{kind=k,outcome=transient_error,queue=tq}":                         1,
			"backstop.task.duration{kind=k,outcome=succeeded,queue=tq}":                          3,
			"backstop.dead_letters{kind=k,queue=tq,reason=attempts_exhausted,too_complex=false}": 1,
		} {
			if got[k] != v {
				t.Errorf("%s = %d, want %d (all %v)", k, got[k], v, got)
			}
		}

		// Spans: one per attempt, named by its claim's traceparent.
		procs := map[string]sdktrace.ReadOnlySpan{}
		sends := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range sr.Ended() {
			id := ""
			for _, kv := range s.Attributes() {
				if kv.Key == "messaging.message.id" {
					id = kv.Value.AsString()
				}
			}
			switch s.Name() {
			case "process tq":
				if procs[id] != nil {
					t.Errorf("two process spans for %s", id)
				}
				procs[id] = s
			case "send tq":
				sends[id] = s
			}
		}
		want := map[string]string{a.ID: "succeeded", bb.ID: "succeeded", c.ID: "succeeded", d.ID: "transient_error"}
		for id, outcome := range want {
			p, s := procs[id], sends[id]
			if p == nil || s == nil {
				t.Fatalf("task %s: process span %v, send span %v", id, p, s)
			}
			tp := "00-" + p.SpanContext().TraceID().String() + "-" + p.SpanContext().SpanID().String() + "-01"
			if byID[id].AttemptTraceParent != tp {
				t.Errorf("task %s: claim traceparent %q, span %q", id, byID[id].AttemptTraceParent, tp)
			}
			if p.Parent().SpanID() != s.SpanContext().SpanID() || len(p.Links()) != 1 || p.Links()[0].SpanContext.SpanID() != s.SpanContext().SpanID() {
				t.Errorf("task %s: process span not a child of / linked to its send span", id)
			}
			attrs := map[string]string{}
			for _, kv := range p.Attributes() {
				attrs[string(kv.Key)] = kv.Value.Emit()
			}
			if attrs["backstop.outcome"] != outcome || attrs["run_id"] != "run-7" || attrs["messaging.system"] != "backstop" ||
				attrs["messaging.destination.name"] != "tq" || attrs["backstop.attempt"] != "1" {
				t.Errorf("task %s: span attributes %v", id, attrs)
			}
			if outcome != "succeeded" && attrs["error.type"] != outcome {
				t.Errorf("task %s: error.type %q", id, attrs["error.type"])
			}
		}

		// Server log lines about an attempt or an enqueue name its span.
		seen := map[string]bool{}
		for _, r := range logs.Records(t) {
			id, _ := r["task_id"].(string)
			switch r["msg"] {
			case "task completed", "task attempt failed (remote)":
				p := procs[id]
				if p == nil || r["trace_id"] != p.SpanContext().TraceID().String() || r["span_id"] != p.SpanContext().SpanID().String() {
					t.Errorf("log %v: want trace_id/span_id of the attempt's span", r)
				}
				seen[r["msg"].(string)] = true
			case "task enqueued":
				s := sends[id]
				if s == nil || r["trace_id"] != s.SpanContext().TraceID().String() || r["span_id"] != s.SpanContext().SpanID().String() {
					t.Errorf("log %v: want trace_id/span_id of the send span", r)
				}
				seen["task enqueued"] = true
			}
		}
		if len(seen) != 3 {
			t.Errorf("log lines seen: %v", seen)
		}
	})
}

func attrString(s attribute.Set) string {
	out := ""
	for _, kv := range s.ToSlice() {
		if out != "" {
			out += ","
		}
		out += string(kv.Key) + "=" + kv.Value.Emit()
	}
	return out
}
