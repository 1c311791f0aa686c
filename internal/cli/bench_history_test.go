package cli_test

import (
	"context"
	"database/sql"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop/internal/cli"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testdb"
)

// TestBenchHistory: `bench --history 10000` fills the history in the run's
// queue (succeeded tasks, their event rows, an execution row for every
// tenth), drains, probes and prints the history line before the summary;
// on both stores.
func TestBenchHistory(t *testing.T) {
	t.Parallel()
	for name, url := range map[string]func(testing.TB) string{"sqlite": testdb.SQLite, "postgres": testdb.Postgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			benchHistory(t, url(t))
		})
	}
}

func benchHistory(t *testing.T, db string) {
	{
		code, stdout, stderr := execMain(t, "--db", db, "bench", "--history", "10000", "-n", "500", "--workers", "20",
			"--probe", "100", "--probe-batch", "10", "--telemetry=false")
		if code != 0 {
			t.Fatalf("bench --history exited %d: %s\n%s", code, stderr, stdout)
		}
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		last, hist := lines[len(lines)-1], lines[len(lines)-2]
		if !strings.HasPrefix(last, "bench: worked=500 ") ||
			!regexp.MustCompile(`^history: rows=10000 db_bytes=[1-9][0-9]* claim_p50=[0-9.]+ms claim_p99=[0-9.]+ms settle_p50=`).MatchString(hist) ||
			!strings.Contains(stdout, "bench: probe claims=10 batch=10 ") {
			t.Fatalf("output:\n%s", stdout)
		}
		queue := regexp.MustCompile(`queue=(bench-\S+)`).FindStringSubmatch(lines[0])
		if queue == nil || !strings.Contains(lines[0], "history filled rows=10000 executions=999 event_rows=40 ") {
			t.Fatalf("fill line: %s", lines[0])
		}
		// The rows are there: 10,000 history tasks, 500 drained, 100
		// probed, all succeeded, in the run's queue; the history's event
		// rows name them.
		ctx := context.Background()
		s, err := dburl.Open(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var tasks, history, execs, events int
		q := `SELECT (SELECT count(*) FROM backstop_tasks WHERE queue = $1 AND state = 'succeeded'),
			(SELECT count(*) FROM backstop_tasks WHERE queue = $1 AND worker_id = 'bench-history' AND event_links IS NOT NULL),
			(SELECT count(*) FROM backstop_executions WHERE worker_id = 'bench-history' AND outcome = 'transient_error'),
			(SELECT count(*) FROM backstop_events WHERE type = 'task.succeeded' AND $1 = ANY(queues) AND cardinality(subjects) = 1000)`
		if strings.HasPrefix(db, "sqlite") {
			q = strings.NewReplacer("$1 = ANY(queues) AND cardinality(subjects) = 1000", "json_array_length(subjects) = 1000 AND queues LIKE '%' || ?1 || '%'",
				"event_links", "event_seqs", "$1", "?1").Replace(q)
		}
		if err := queryRow(ctx, s, q, queue[1]).Scan(&tasks, &history, &execs, &events); err != nil {
			t.Fatal(err)
		}
		if tasks != 10600 || history != 10000 || execs != 999 || events != 10 {
			t.Errorf("succeeded=%d history=%d failed executions=%d history task.succeeded rows=%d, want 10600 10000 999 10",
				tasks, history, execs, events)
		}
	}
}

// TestBenchHistoryUsage: bad history flags are usage errors (exit 2),
// nothing run.
func TestBenchHistoryUsage(t *testing.T) {
	t.Parallel()
	db := testdb.SQLite(t)
	for _, args := range [][]string{
		{"--history", "-1"},
		{"--history", "10", "--duration", "1s"},
		{"--history", "10", "--probe-batch", "0"},
		{"--history", "10", "--probe", "-5"},
		{"--history", "10", "--follow-events"},
		{"--history", "x"},
		{"--retain"},
		{"--probe", "10"},
	} {
		code, stdout, stderr := execMain(t, append([]string{"--db", db, "bench"}, args...)...)
		if code != cli.ExitUsage || !strings.Contains(stderr, "--") || stdout != "" {
			t.Errorf("%v: exit %d, want %d (stdout %q, stderr %q)", args, code, cli.ExitUsage, stdout, stderr)
		}
	}
}

// queryRow runs q on the store's own connections (Postgres or SQLite).
func queryRow(ctx context.Context, s any, q string, args ...any) interface{ Scan(...any) error } {
	switch s := s.(type) {
	case interface{ Pool() *pgxpool.Pool }:
		return s.Pool().QueryRow(ctx, q, args...)
	case interface{ DB() *sql.DB }:
		return s.DB().QueryRowContext(ctx, q, args...)
	}
	panic("store is neither Postgres nor SQLite")
}
