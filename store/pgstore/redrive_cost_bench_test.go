//go:build linux

package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

// BenchmarkRedriveCost is BenchmarkRedrive's redrive (b.N dead letters,
// batches of 500) measured by what it costs rather than by the wall
// clock, which the load of a shared box swings 2–8×: the CPU time of the
// server's backends serving the bench's connections, read from
// /proc/<pid>/schedstat before and after (so the server must run on this
// machine; skipped otherwise), and the client's own CPU time, per dead
// letter. BACKSTOP_BENCH_REDRIVE_SQL, if set, runs once before the
// redrive (an experiment: drop an index, disable a trigger). The file uses
// only APIs that 7e48f14 (the release before per-item outcomes) has too,
// so it is copied into that tree unchanged to compare the two:
//
//	scripts/with-postgres go test -run '^$' -bench RedriveCost -benchtime 20000x ./store/pgstore/
func BenchmarkRedriveCost(b *testing.B) {
	ctx := context.Background()
	url := testdb.Postgres(b)
	s, err := pgstore.Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	c, err := backstop.NewClient(s, &backstop.Config{})
	if err != nil {
		b.Fatal(err)
	}
	// The dead letters of storetest.BenchRedrive (not called: 7e48f14's
	// has no place to measure between its fill and its redrive).
	queue := fmt.Sprintf("redrive-%d", time.Now().UnixNano())
	now := time.Now().UTC().Truncate(time.Microsecond)
	n := b.N
	for start := 0; start < n; start += 5000 {
		chunk := make([]*bt.Task, 0, 5000)
		for i := start; i < min(start+5000, n); i++ {
			chunk = append(chunk, &bt.Task{ID: fmt.Sprintf("%s-%09d", queue, i), Queue: queue, Kind: "noop", State: bt.StatePending,
				MaxAttempts: 1, Payload: json.RawMessage(`{"n":1}`), RunAt: now, CreatedAt: now, UpdatedAt: now})
		}
		if _, err := s.Enqueue(ctx, chunk, store.EnqueueOpts{}); err != nil {
			b.Fatal(err)
		}
		got, err := s.Claim(ctx, store.ClaimParams{Queue: queue, WorkerID: "bench", Max: len(chunk), Now: now, Lease: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		ss := make([]store.Settlement, len(got))
		for i, t := range got {
			ss[i] = store.Settlement{TaskID: t.ID, ExecutionID: t.ExecutionID, Outcome: bt.OutcomePermanentError, Error: "boom",
				FinishedAt: now, State: bt.StateDead, DeadReason: bt.ReasonPermanentError}
		}
		if _, err := s.Settle(ctx, ss); err != nil {
			b.Fatal(err)
		}
	}
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close(ctx)
	if q := os.Getenv("BACKSTOP_BENCH_REDRIVE_SQL"); q != "" {
		if _, err := admin.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	// backends is the CPU time (ns) of each backend of the bench's
	// database but admin's.
	backends := func() map[int32]int64 {
		rows, err := admin.Query(ctx, `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`)
		if err != nil {
			b.Fatal(err)
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			b.Fatal(err)
		}
		cpu := map[int32]int64{}
		for _, p := range pids {
			raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", p))
			if err != nil {
				b.Skipf("the server's backends are not readable here: %v", err)
			}
			var ns int64
			fmt.Sscan(string(raw), &ns)
			cpu[p] = ns
		}
		return cpu
	}
	self := func() int64 {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return ru.Utime.Nano() + ru.Stime.Nano()
	}
	b.ResetTimer()
	srv0, cl0, start := backends(), self(), time.Now()
	res, err := c.Redrive(ctx, backstop.RedriveParams{Filter: backstop.ListParams{Queue: queue}, Actor: "bench", BatchSize: 500}, nil)
	elapsed, cl1, srv1 := time.Since(start), self(), backends()
	if err != nil {
		b.Fatal(err)
	}
	if res.Replayed != n {
		b.Fatalf("redrove %d of %d", res.Replayed, n)
	}
	var srv int64
	for p, ns := range srv1 {
		srv += ns - srv0[p] // a backend opened during the redrive counts whole
	}
	b.ReportMetric(float64(srv)/1e3/float64(n), "server_µs/letter")
	b.ReportMetric(float64(cl1-cl0)/1e3/float64(n), "client_µs/letter")
	b.ReportMetric(float64(n)/elapsed.Seconds(), "dead_letters/s")
}
