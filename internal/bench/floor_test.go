package bench_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/bench"
	"github.com/backstophq/backstop/internal/testdb"
)

// TestFloor runs the floors (a small n, batches that do not divide it) and
// the interleaved comparison on both stores: every row is drained, the
// ratios are printed, and the floor's table or schema is gone afterwards.
func TestFloor(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ctx := context.Background()
		c := client(t, db)
		f, err := bench.Floor(ctx, c.Store(), bench.FloorConfig{N: 250, Batch: 40, Claimers: 3})
		if err != nil {
			t.Fatal(err)
		}
		if f.N != 250 || f.Drain <= 0 || f.Enqueue <= 0 || f.DrainPerSec() <= 0 || f.EnqueuePerSec() <= 0 {
			t.Fatalf("floor result %+v", f)
		}
		// 250 rows in claims of at most 40: at least 7 claims, each with its complete.
		if f.DrainStatements < 14 {
			t.Errorf("drain statements %d, want at least 14", f.DrainStatements)
		}
		switch s := c.Store().(type) {
		case interface{ Pool() *pgxpool.Pool }:
			var n int
			if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, f.Name).Scan(&n); err != nil || n != 0 {
				t.Errorf("schema %s left behind (%d, %v)", f.Name, n, err)
			}
		case interface{ DB() *sql.DB }:
			var n int
			if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name LIKE ?`, f.Name+"%").Scan(&n); err != nil || n != 0 {
				t.Errorf("table %s left behind (%d, %v)", f.Name, n, err)
			}
		default:
			t.Fatalf("store %T", s)
		}

		var out bytes.Buffer
		all, err := bench.CompareFloor(ctx, c, c.Store(), 2, bench.FloorConfig{N: 200, Batch: 50}, bench.Config{Workers: 20}, &out)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 2 || all[0].Backstop.Worked != 200 || all[1].DrainRatio() <= 0 || all[1].EnqueueRatio() <= 0 {
			t.Fatalf("comparison %+v", all)
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != 3 || !strings.HasPrefix(lines[0], "floor: run=1 ") ||
			!strings.HasPrefix(lines[2], "floor: runs=2 drain_ratio_median=") {
			t.Fatalf("output:\n%s", out.String())
		}
	})
}

// TestFloorPayload: with a payload, Backstop's tasks in the comparison
// carry it (the floor's rows carry the same); a payload that is not a
// JSON object is refused by the floor and the bench before anything is
// written.
func TestFloorPayload(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ctx := context.Background()
		c := client(t, db)
		payload := json.RawMessage(`{"customer_id":"c-1","order_id":7,"amount":12.5}`)
		all, err := bench.CompareFloor(ctx, c, c.Store(), 1, bench.FloorConfig{N: 120, Batch: 50, Payload: payload},
			bench.Config{Workers: 10}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		ts, err := c.List(ctx, backstop.ListParams{Queue: all[0].Backstop.Queue, Limit: 200})
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) != 120 {
			t.Fatalf("%d tasks in the comparison's queue; want 120", len(ts))
		}
		for _, task := range ts {
			var got, want map[string]any
			if err := json.Unmarshal(task.Payload, &got); err != nil {
				t.Fatal(err)
			}
			_ = json.Unmarshal(payload, &want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("task %s payload %s; want %s", task.ID, task.Payload, payload)
			}
		}
		for _, bad := range []string{`[1]`, `x`, `null`, `"s"`} {
			if _, err := bench.Floor(ctx, c.Store(), bench.FloorConfig{N: 10, Payload: json.RawMessage(bad)}); err == nil || !strings.Contains(err.Error(), "--payload") {
				t.Errorf("floor with payload %s: %v; want an error naming --payload", bad, err)
			}
			if _, err := bench.Run(ctx, c, bench.Config{N: 10, Workers: 2, Payload: json.RawMessage(bad)}); err == nil || !strings.Contains(err.Error(), "--payload") {
				t.Errorf("bench with payload %s: %v; want an error naming --payload", bad, err)
			}
		}
		n, err := c.List(ctx, backstop.ListParams{Limit: 10000})
		if err != nil || len(n) != 120 {
			t.Fatalf("%d tasks after the refused runs (%v); want the comparison's 120", len(n), err)
		}
	})
}
