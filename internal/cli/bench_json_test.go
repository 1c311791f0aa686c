package cli_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/cli"
)

// TestBenchJSON: `bench -o json` prints one JSON object on stdout (the
// report lines go to stderr): the latency run's figures under latency,
// the drain's at the top; `-o json` with --history is a usage error.
func TestBenchJSON(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "bench.db")
	if code, _, stderr := execMain(t, "--db", db, "migrate"); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, stderr)
	}
	code, stdout, stderr := execMain(t, "--db", db, "-o", "json", "bench", "--rate", "100", "--duration", "500ms", "--workers", "10")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var j struct {
		Mode    string `json:"mode"`
		Worked  int    `json:"worked"`
		Latency *struct {
			Samples int            `json:"samples"`
			P99Ms   *float64       `json:"p99_ms"`
			Stages  map[string]any `json:"stages"`
		} `json:"latency"`
		Canary *struct{} `json:"canary"`
	}
	if err := json.Unmarshal([]byte(stdout), &j); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
	}
	if j.Mode != "latency" || j.Worked != 50 || j.Latency == nil || j.Latency.Samples != 50 || j.Latency.P99Ms == nil ||
		j.Latency.Stages["claim_to_start"] == nil || j.Canary != nil {
		t.Fatalf("JSON %s: want latency mode, 50 worked, their p99 and stages, no canary on SQLite", stdout)
	}
	if !strings.Contains(stderr, "bench: latency enqueue_to_start p50=") || strings.Contains(stdout, "bench: ") {
		t.Fatalf("report lines: stdout %q, stderr %q: want them on stderr", stdout, stderr)
	}
	code, stdout, stderr = execMain(t, "--db", db, "-o", "json", "bench", "-n", "20", "--workers", "4")
	var d map[string]any
	if code != 0 || json.Unmarshal([]byte(stdout), &d) != nil || d["mode"] != "drain" || d["worked"] != float64(20) || d["latency"] != nil {
		t.Fatalf("drain: exit %d, stdout %s, stderr %s", code, stdout, stderr)
	}
	code, _, stderr = execMain(t, "--db", db, "-o", "json", "bench", "--history", "0", "-n", "10")
	if code != cli.ExitUsage || !strings.Contains(stderr, "-o json") {
		t.Fatalf("--history with -o json: exit %d, want %d (stderr %q)", code, cli.ExitUsage, stderr)
	}
}
