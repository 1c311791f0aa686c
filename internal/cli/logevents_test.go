package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"github.com/backstophq/backstop/internal/testdb"
)

// otlpLogs is an OTLP/HTTP logs receiver on loopback: what an OpenTelemetry
// Collector's otlp receiver gets from the binary.
type otlpLogs struct {
	mu     sync.Mutex
	events []otlpEvent
}

type otlpEvent struct {
	name          string
	attrs         map[string]string
	traceID, span string
}

func (o *otlpLogs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req collogs.ExportLogsServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	if r.URL.Path != "/v1/logs" || err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rl := range req.ResourceLogs {
		for _, sl := range rl.ScopeLogs {
			for _, lr := range sl.LogRecords {
				if lr.EventName == "" {
					continue
				}
				e := otlpEvent{name: lr.EventName, attrs: map[string]string{}}
				for _, kv := range lr.Attributes {
					e.attrs[kv.Key] = anyValue(kv.Value)
				}
				o.events = append(o.events, e)
			}
		}
	}
	o.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	b, _ := proto.Marshal(&collogs.ExportLogsServiceResponse{})
	_, _ = w.Write(b)
}

// anyValue is an OTLP attribute value as text.
func anyValue(v *common.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *common.AnyValue_StringValue:
		return x.StringValue
	case *common.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *common.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *common.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	}
	return v.String()
}

func (o *otlpLogs) of(taskID string) map[string][]otlpEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string][]otlpEvent{}
	for _, e := range o.events {
		if e.attrs["task_id"] == taskID {
			out[e.name] = append(out[e.name], e)
		}
	}
	return out
}

// TestWorkExecLogEventsOTLP: with OTLP logs on (the standard OTEL_*
// variables), `backstop enqueue` and `backstop work -- CMD` on the
// database send the task's log events to the OTLP endpoint — enqueued by
// the producer, claimed, started and succeeded (with its duration) by the
// worker that ran the program — each once, with event.name and the
// task's correlation attributes.
func TestWorkExecLogEventsOTLP(t *testing.T) {
	recv := &otlpLogs{}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	t.Setenv("OTEL_LOGS_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", srv.URL+"/v1/logs")
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	t.Setenv("OTEL_METRICS_EXPORTER", "none")
	for _, db := range []struct {
		name string
		url  func(testing.TB) string
	}{{"sqlite", testdb.SQLite}, {"postgres", testdb.Postgres}} {
		t.Run(db.name, func(t *testing.T) {
			e := &cliEnv{t: t, db: db.url(t)}
			id := "exec-" + db.name
			e.ok("enqueue", "--queue", "xq", "--kind", "k", "--id", id, "--attr", "run_id=run-x", "--attr", "plan_hash=ph-x")
			if r := e.run("", "work", "--queue", "xq", "--exit-after-idle", "300ms", "--", "sh", "-c", "exit 0"); r.code != 0 {
				t.Fatalf("work: %+v", r)
			}
			got := recv.of(id)
			for _, name := range []string{"backstop.task.enqueued", "backstop.task.claimed", "backstop.task.started", "backstop.task.succeeded"} {
				if len(got[name]) != 1 {
					t.Errorf("%d %s events, want 1 (all: %v)", len(got[name]), name, got)
					continue
				}
				a := got[name][0].attrs
				if a["event.name"] != name || a["queue"] != "xq" || a["kind"] != "k" || a["run_id"] != "run-x" || a["plan_hash"] != "ph-x" {
					t.Errorf("%s attributes %v", name, a)
				}
				if name != "backstop.task.enqueued" && a["execution_id"] == "" {
					t.Errorf("%s without execution_id: %v", name, a)
				}
			}
			if s := got["backstop.task.succeeded"]; len(s) == 1 && s[0].attrs["duration_ms"] == "" {
				t.Errorf("succeeded without its duration: %v", s[0].attrs)
			}
		})
	}
}
