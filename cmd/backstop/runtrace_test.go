package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A run is one trace through the real binary: `workflows run --trace`
// starts it, a `backstop work` exec worker runs its three steps, both with
// OTEL_TRACES_EXPORTER=console; every span either prints (the run's root,
// each step's dispatch, each attempt's process) is in one trace, and the
// programs got a TRACEPARENT of that trace.

const runTraceYAML = `name: three
queue: wf
steps:
  - {id: a, kind: k}
  - {id: b, kind: k, needs: [a]}
  - {id: c, kind: k, needs: [b]}
`

// consoleSpan is what the console span exporter prints of a span.
type consoleSpan struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
}

// consoleSpans decodes the JSON span objects of out, skipping other lines.
func consoleSpans(out []byte) []consoleSpan {
	var spans []consoleSpan
	for len(bytes.TrimSpace(out)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(out))
		var s consoleSpan
		if err := dec.Decode(&s); err != nil {
			i := bytes.IndexByte(out, '\n')
			if i < 0 {
				break
			}
			out = out[i+1:]
			continue
		}
		if s.Name != "" {
			spans = append(spans, s)
		}
		out = out[dec.InputOffset():]
	}
	return spans
}

func TestRunIsOneTraceThroughCLI(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			db, dir := st.url(t), t.TempDir()
			cliOK(t, "--db", db, "migrate")
			file := filepath.Join(dir, "three.yaml")
			if err := os.WriteFile(file, []byte(runTraceYAML), 0o644); err != nil {
				t.Fatal(err)
			}
			cliOK(t, "--db", db, "workflows", "apply", file)
			env := []string{"OTEL_TRACES_EXPORTER=console", "OTEL_METRICS_EXPORTER=none", "OTEL_LOGS_EXPORTER=none"}
			runOut, errOut, code := wfCLI(t, env, "--db", db, "workflows", "run", "three", "--run-id", "traced-run", "--trace")
			if code != 0 {
				t.Fatalf("workflows run: exit %d\n%s", code, errOut)
			}
			tps := filepath.Join(dir, "traceparents")
			cmd := exec.Command(binary, "--db", db, "work", "--queue", "wf", "--exit-after-idle", "1s",
				"--", "sh", "-c", `cat > /dev/null; echo "$TRACEPARENT" >> "$TPS"`)
			cmd.Env = append(append(os.Environ(), env...), "TPS="+tps)
			w := startProc(t, cmd, filepath.Join(dir, "work.stderr"), "work", 0)
			waitRunState(t, db, "traced-run", "succeeded")
			w.wait(t, "work")
			workOut, err := os.ReadFile(filepath.Join(dir, "work.stderr")) // stdout and stderr
			if err != nil {
				t.Fatal(err)
			}

			spans := append(consoleSpans([]byte(runOut)), consoleSpans(workOut)...)
			traces, names := map[string]bool{}, map[string]int{}
			for _, s := range spans {
				traces[s.SpanContext.TraceID] = true
				names[strings.Fields(s.Name)[0]]++
			}
			if len(traces) != 1 || names["run"] != 1 || names["dispatch"] != 3 || names["process"] != 3 {
				t.Fatalf("spans %v in traces %v, want 1 run, 3 dispatch and 3 process spans of one trace\nrun stdout:\n%s\nwork stdout:\n%s",
					names, traces, runOut, workOut)
			}
			b, _ := os.ReadFile(tps)
			lines := strings.Fields(string(b))
			if len(lines) != 3 {
				t.Fatalf("programs saw TRACEPARENT %q", b)
			}
			for _, tp := range lines {
				if parts := strings.Split(tp, "-"); len(parts) != 4 || !traces[parts[1]] || parts[3] != "01" {
					t.Errorf("a program saw TRACEPARENT %q, not of the run's (sampled) trace %v", tp, traces)
				}
			}
		})
	}
}
