package cli_test

import (
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/cli"
)

// TestBenchOrdering runs a small simulation: three lines, the first hold
// printed with the ordered run; a negative hold is a usage error.
func TestBenchOrdering(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := execMain(t, "bench", "ordering", "--keys", "20", "--minutes", "10", "--first-hold", "70s")
	if code != 0 {
		t.Fatalf("bench ordering exited %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ordering off ") || !strings.HasPrefix(lines[1], "ordering on ") ||
		!strings.HasPrefix(lines[2], "ordering: false_miss_reduction=") {
		t.Fatalf("output:\n%s", stdout)
	}
	if !strings.Contains(lines[1], " first_hold=1m10s first_held=") || strings.Contains(lines[0], "first_hold") {
		t.Fatalf("the first hold is not reported with the ordered run:\n%s", stdout)
	}
	for _, args := range [][]string{{"--first-hold", "-1s"}, {"--keys", "0"}} {
		code, _, stderr := execMain(t, append([]string{"bench", "ordering"}, args...)...)
		if code != cli.ExitUsage || !strings.Contains(stderr, "bench ordering") {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, code, cli.ExitUsage, stderr)
		}
	}
}

// TestBenchFloor: `bench floor` on a SQLite file prints a line per run and
// the summary; a run count of 0 is a usage error, nothing run.
func TestBenchFloor(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + t.TempDir() + "/floor.db"
	code, stdout, stderr := execMain(t, "--db", db, "bench", "floor", "-n", "300", "--runs", "2", "--batch", "70", "--workers", "16")
	if code != 0 {
		t.Fatalf("bench floor exited %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "floor: run=2 store=sqlite n=300 ") ||
		!strings.HasPrefix(lines[2], "floor: runs=2 drain_ratio_median=") {
		t.Fatalf("output:\n%s", stdout)
	}
	code, stdout, _ = execMain(t, "--db", db, "bench", "floor", "-n", "300", "--floor-only", "--runs", "1")
	if code != 0 || !strings.HasPrefix(stdout, "floor: run=1 store=sqlite n=300 drain=") {
		t.Fatalf("--floor-only: exit %d, output %q", code, stdout)
	}
	code, _, stderr = execMain(t, "--db", db, "bench", "floor", "--runs", "0")
	if code != cli.ExitUsage || !strings.Contains(stderr, "bench floor") {
		t.Errorf("--runs 0: exit %d, want %d (stderr %q)", code, cli.ExitUsage, stderr)
	}
	code, stdout, stderr = execMain(t, "--db", db, "bench", "floor", "-n", "200", "--runs", "1", "--workers", "16",
		"--payload", `{"customer_id":"c-1","amount":12.5}`)
	if code != 0 || !strings.Contains(stdout, "floor: runs=1 ") {
		t.Fatalf("--payload: exit %d, output %q, stderr %q", code, stdout, stderr)
	}
	for _, args := range [][]string{{"bench", "floor", "--payload", "[1]"}, {"bench", "--payload", "x"}} {
		code, _, stderr = execMain(t, append([]string{"--db", db}, args...)...)
		if code != cli.ExitUsage || !strings.Contains(stderr, "--payload") {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, code, cli.ExitUsage, stderr)
		}
	}
}
