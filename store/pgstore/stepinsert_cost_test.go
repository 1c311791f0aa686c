package pgstore

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	bt "github.com/backstophq/backstop/backstoptype"
)

// TestStepInsertCost measures a workflow plan's task insert (the step
// tasks a settle enqueues, planPipeline: strict, counted) on the database
// named by BACKSTOP_STEPINS_URL (migrated; skipped without it), one
// connection, 1-4 rows a call (the benchmark's mean is 2.4): the
// statement per row count (VALUES, as sent) against one statement of
// arrays for any row count (unnest), in interleaved rounds; and EXPLAIN
// (ANALYZE, BUFFERS) of each for 3 rows (planning, execution, triggers).
func TestStepInsertCost(t *testing.T) {
	u := os.Getenv("BACKSTOP_STEPINS_URL")
	if u == "" {
		t.Skip("BACKSTOP_STEPINS_URL is not set")
	}
	ctx := t.Context()
	sep := map[bool]string{true: "&", false: "?"}[strings.Contains(u, "?")]
	s, err := Open(ctx, u+sep+"pool_max_conns=1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	n := 0
	batch := func(rows int) []row {
		out := make([]row, rows)
		for i := range out {
			n++
			tk := &bt.Task{ID: fmt.Sprintf("run%d-%07d.s%d", at.UnixNano(), n, i), Queue: "bench", Kind: "noop", State: bt.StatePending,
				MaxAttempts: 25, Payload: []byte("{}"), RunAt: at, CreatedAt: at, UpdatedAt: at,
				Attributes: map[string]string{"run_id": fmt.Sprintf("run%07d", n), "step_id": "s1", "workflow": "linear",
					"plan_hash": "0123456789abcdef"}}
			r, err := newRow(tk, 0)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = r
		}
		return out
	}
	values := func(b []row) (string, []any) {
		var args []any
		for _, r := range b {
			args = r.args(args)
		}
		// The multi-row VALUES form the plan's insert had before (no ON
		// CONFLICT, counting its rows), against the arrays it has now.
		sql := strings.Replace(sqlInsertTasks(len(b), "(id)"), " ON CONFLICT (id) DO NOTHING", "", 1)
		sql = strings.Replace(sql, " SELECT id FROM ins", ", "+countedInsert+" SELECT id FROM ins", 1)
		return sql, append(args, "bench")
	}
	arrays := func(b []row) (string, []any) {
		return planInsertSQL(true, true), append(taskArrays(b), "bench")
	}
	variants := []struct {
		name string
		sql  func([]row) (string, []any)
	}{{"values", values}, {"unnest", arrays}}
	// Each round a new connection per variant (the statement prepared
	// and planned anew, as on each of a pool's connections): the first
	// 20 calls (cold: prepared, custom plans) and the next 80 (warm),
	// the statement's round trip alone, each call in a transaction.
	rng := rand.New(rand.NewPCG(1, 2))
	cold, warm := map[string][]float64{}, map[string][]float64{}
	for range 8 {
		for _, v := range variants {
			conn, err := pgx.Connect(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			var c, w time.Duration
			for i := range 100 {
				sql, args := v.sql(batch(1 + rng.IntN(4)))
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				rs, err := tx.Query(ctx, sql, args...)
				if err == nil {
					_, err = countIDs(rs)
				}
				d := time.Since(start)
				if err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				if i < 20 {
					c += d
				} else {
					w += d
				}
			}
			_ = conn.Close(ctx)
			cold[v.name] = append(cold[v.name], float64(c.Microseconds())/20)
			warm[v.name] = append(warm[v.name], float64(w.Microseconds())/80)
		}
	}
	med := func(xs []float64) float64 {
		ys := append([]float64(nil), xs...)
		sort.Float64s(ys)
		return (ys[len(ys)/2-1] + ys[len(ys)/2]) / 2
	}
	for _, v := range variants {
		t.Logf("%s: cold (first 20 calls of a connection) median %.0f µs a call %.0f; warm (next 80) median %.0f µs %.0f",
			v.name, med(cold[v.name]), cold[v.name], med(warm[v.name]), warm[v.name])
	}
	for i := range cold["values"] {
		t.Logf("round %d unnest/values: cold %.2f warm %.2f", i, cold["unnest"][i]/cold["values"][i], warm["unnest"][i]/warm["values"][i])
	}
	for _, v := range variants {
		sql, args := v.sql(batch(3))
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for rs.Next() {
			var l string
			if err := rs.Scan(&l); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, l)
		}
		_ = tx.Rollback(ctx)
		t.Logf("%s, 3 rows:\n%s", v.name, strings.Join(lines, "\n"))
	}
}
