package cli_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/cli"
	"github.com/backstophq/backstop/internal/testdb"
)

// TestBenchSustainUsage: bad sizes, and --hold-snapshot or --explain on
// SQLite, are usage errors naming the problem, and nothing is written (the
// SQLite file is not even created).
func TestBenchSustainUsage(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sustain.db")
	for _, args := range [][]string{
		{"--duration", "0s"},
		{"--interval", "-1s"},
		{"--workers", "0"},
		{"--backlog", "0"},
		{"--producers", "0"},
		{"--batch", "0"},
		{"--hold-snapshot"},
		{"--explain"},
	} {
		code, stdout, stderr := execMain(t, append([]string{"--db", "sqlite://" + path, "bench", "sustain", "--duration", "1s"}, args...)...)
		if code != cli.ExitUsage || !strings.Contains(stderr, "bench sustain") || stdout != "" {
			t.Errorf("%v: exit %d, want %d (stdout %q, stderr %q)", args, code, cli.ExitUsage, stdout, stderr)
		}
		if strings.HasPrefix(args[0], "--hold") && !strings.Contains(stderr, "Postgres") {
			t.Errorf("%v: the error does not say the flag needs Postgres: %q", args, stderr)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a refused run created %s (%v)", path, err)
	}
	code, _, stderr := execMain(t, "--db", "sqlite://"+path, "bench", "sustain", "--duration", "soon")
	if code != cli.ExitUsage || !strings.Contains(stderr, "--duration") {
		t.Errorf("--duration soon: exit %d, want %d (stderr %q)", code, cli.ExitUsage, stderr)
	}
}

var sustainLine = regexp.MustCompile(`^sustain: interval=(\d+) length=[0-9.]+s worked=(\d+) jobs_per_sec=[0-9.]+ enqueued=\d+ backlog_min=\d+`)

// TestBenchSustainSQLite: a short sustained run reports each interval and
// the summary; SQLite lines carry no dead-tuple or xmin figures.
func TestBenchSustainSQLite(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "sustain.db")
	code, stdout, stderr := execMain(t, "--db", db, "bench", "sustain", "--duration", "2s", "--interval", "700ms",
		"--workers", "16", "--backlog", "300", "--batch", "50")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var intervals []string
	for _, l := range lines {
		if sustainLine.MatchString(l) {
			intervals = append(intervals, l)
		}
	}
	if len(intervals) != 3 || strings.Contains(stdout, "dead_tasks=") || strings.Contains(stdout, "xmin_age=") ||
		!strings.HasPrefix(lines[len(lines)-1], "sustain: store=sqlite held_snapshot=false worked=") {
		t.Fatalf("output:\n%s", stdout)
	}
}

// TestBenchSustainHeldSnapshot: on Postgres, a short run behind a held
// snapshot reports every interval with the dead tuples piling up and the
// holder's xmin getting older, EXPLAIN of the claim's pick at both ends,
// and the holder's backend_xmin unchanged at the end.
func TestBenchSustainHeldSnapshot(t *testing.T) {
	db := testdb.Postgres(t)
	code, stdout, stderr := execMain(t, "--db", db, "bench", "sustain", "--duration", "3s", "--interval", "1s",
		"--workers", "50", "--backlog", "500", "--batch", "100", "--hold-snapshot", "--explain")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	held := regexp.MustCompile(`sustain: snapshot held by pid \d+, backend_xmin=(\d+)\n`).FindStringSubmatch(stdout)
	end := regexp.MustCompile(`sustain: snapshot still held at the end, backend_xmin=(\d+)\n`).FindStringSubmatch(stdout)
	if held == nil || end == nil || held[1] != end[1] {
		t.Fatalf("the snapshot's xmin is not reported, or moved:\n%s", stdout)
	}
	ivs := regexp.MustCompile(`(?m)^sustain: interval=\d+ .* dead_tasks=(\d+) dead_all=\d+ xmin_age=(\d+)$`).FindAllStringSubmatch(stdout, -1)
	if len(ivs) != 3 || ivs[2][1] == "0" || ivs[2][2] == "0" {
		t.Fatalf("intervals (want 3, dead tuples and an xmin age at the last):\n%s", stdout)
	}
	if strings.Count(stdout, "Index Scan using backstop_tasks_claim") != 3 ||
		!strings.Contains(stdout, "sustain: explain start:") || !strings.Contains(stdout, "sustain: explain end:") ||
		!regexp.MustCompile(`sustain: explain end, from the claim cursor:\n(?s:.*)Index Cond: .*ROW\(run_at, id\) >`).MatchString(stdout) {
		t.Fatalf("no EXPLAIN of the pick at both ends and of the cursor pick at the end:\n%s", stdout)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if !strings.HasPrefix(lines[len(lines)-1], "sustain: store=postgres held_snapshot=true worked=") {
		t.Fatalf("summary:\n%s", stdout)
	}
}
