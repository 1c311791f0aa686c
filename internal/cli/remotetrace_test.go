package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/backstophq/backstop"
)

// tracedAPIServer is apiServer with the library's spans recorded in sr.
func tracedAPIServer(t *testing.T, db string, sr *tracetest.SpanRecorder) string {
	t.Helper()
	return apiServerWith(t, db, &backstop.Config{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))})
}

// TestRemoteWorkTraceParent: `backstop work --server -- CMD` hands the
// program the traceparent of the attempt's server-side span (TRACEPARENT),
// so the program's own spans are its children; the span ends with the
// attempt's outcome when the worker reports.
func TestRemoteWorkTraceParent(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		sr := tracetest.NewSpanRecorder()
		var tok struct{ Secret string }
		e.json(&tok, "tokens", "create", "--name", "w", "--role", "admin")
		r := &remoteEnv{cliEnv: e, url: tracedAPIServer(t, e.db, sr), token: tok.Secret}
		r.remote("", "enqueue", "--queue", "tq", "--kind", "k", "--id", "traced")
		prog := []string{"--", "sh", "-c", `echo "tp=$TRACEPARENT"`}
		work := r.remote("", append([]string{"work", "--queue", "tq", "--exit-after-idle", "300ms"}, prog...)...)
		if work.code != 0 {
			t.Fatalf("work --server: %+v", work)
		}
		logs := r.remote("", "tasks", "logs", "traced")
		var proc, send sdktrace.ReadOnlySpan
		for _, s := range sr.Ended() {
			switch s.Name() {
			case "process tq":
				proc = s
			case "send tq":
				send = s
			}
		}
		if proc == nil || send == nil {
			t.Fatalf("spans: process %v send %v", proc, send)
		}
		want := "tp=00-" + proc.SpanContext().TraceID().String() + "-" + proc.SpanContext().SpanID().String() + "-01\n"
		if logs.stdout != want {
			t.Errorf("program saw %q, want %q", logs.stdout, want)
		}
		if proc.Parent().SpanID() != send.SpanContext().SpanID() || len(proc.Links()) != 1 {
			t.Errorf("process span: parent %v links %v, want the send span", proc.Parent(), proc.Links())
		}
		// The worker's own lines about the attempt name the span too.
		named := false
		for _, line := range strings.Split(strings.TrimSpace(work.stderr), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) != nil || rec["task_id"] != "traced" {
				continue
			}
			if rec["trace_id"] != proc.SpanContext().TraceID().String() || rec["span_id"] != proc.SpanContext().SpanID().String() {
				t.Errorf("worker log line %v: not the attempt span's ids", rec)
			}
			named = true
		}
		if !named {
			t.Errorf("no worker log line about the task:\n%s", work.stderr)
		}
		attrs := map[string]string{}
		for _, kv := range proc.Attributes() {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		if attrs["backstop.outcome"] != "succeeded" || attrs["messaging.message.id"] != "traced" || attrs["backstop.attempt"] != "1" {
			t.Errorf("process span attributes %v", attrs)
		}
	})
}

// TestWorkLogsMasked: a program's output lines are masked (the key list)
// before they are stored, run by `backstop work` on the database and over
// --server alike; so is the output tail kept with the execution.
func TestWorkLogsMasked(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		r := newRemoteEnv(t, e, "admin")
		e.ok("enqueue", "--queue", "mlocal", "--kind", "k", "--id", "m-db", "--max-attempts", "1")
		e.ok("enqueue", "--queue", "mremote", "--kind", "k", "--id", "m-server", "--max-attempts", "1")
		prog := []string{"--", "sh", "-c", `echo "connect password=hunter2 host=db"; echo '{"msg":"x","api_key":"k3y"}'`}
		e.run("", append([]string{"work", "--queue", "mlocal", "--exit-after-idle", "300ms"}, prog...)...)
		r.remote("", append([]string{"work", "--queue", "mremote", "--exit-after-idle", "300ms"}, prog...)...)
		for _, id := range []string{"m-db", "m-server"} {
			want := "connect password=[REDACTED] host=db\n" + `{"msg":"x","api_key":"[REDACTED]"}` + "\n"
			if got := r.same("tasks", "logs", id); got.code != 0 || got.stdout != want {
				t.Errorf("tasks logs %s: %+v, want %q", id, got, want)
			}
			show := e.ok("tasks", "show", id, "-o", "json")
			if strings.Contains(show, "hunter2") || strings.Contains(show, "k3y") {
				t.Errorf("tasks show %s leaks a secret:\n%s", id, show)
			}
		}
	})
}

// TestTraceFlags: `enqueue --trace` and `workflows run --trace` over
// --server force the sampling of the task's and the run's spans (the
// server's spans carry backstop.trace=true).
func TestTraceFlags(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		sr := tracetest.NewSpanRecorder()
		var tok struct{ Secret string }
		e.json(&tok, "tokens", "create", "--name", "w", "--role", "admin")
		r := &remoteEnv{cliEnv: e, url: tracedAPIServer(t, e.db, sr), token: tok.Secret}
		file := filepath.Join(t.TempDir(), "t.yaml")
		if err := os.WriteFile(file, []byte("name: t\nqueue: tq\nsteps:\n  - {id: a, kind: k}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		e.ok("workflows", "apply", file)
		r.remote("", "enqueue", "--queue", "tq", "--kind", "k", "--id", "forced", "--trace")
		r.remote("", "enqueue", "--queue", "tq", "--kind", "k", "--id", "plain")
		r.remote("", "workflows", "run", "t", "--run-id", "forced-run", "--trace")
		forced := map[string]bool{}
		for _, s := range sr.Ended() {
			for _, kv := range s.Attributes() {
				if kv.Key == "backstop.trace" && kv.Value.AsBool() {
					forced[s.Name()+" "+spanAttrOf(s, "messaging.message.id")] = true
				}
			}
		}
		if len(forced) != 2 || !forced["send tq forced"] || !forced["dispatch a forced-run.a"] {
			t.Errorf("forced spans %v, want the forced task's send and the forced run's dispatch", forced)
		}
	})
}

func spanAttrOf(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}
