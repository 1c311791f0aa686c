package pgstore

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// TestEnqueueCost splits the batch enqueue's cost into its parts on the
// database named by BACKSTOP_ENQCOST_URL (migrated by the test; its
// backstop_tasks is emptied and its indexes dropped and made again, so
// point it at a scratch database; skipped without it). Batches of 1,000
// tasks (BACKSTOP_ENQCOST_BATCHES of them per variant and round, 100
// unless set), each in its own transaction on one connection, for each
// variant in turn, BACKSTOP_ENQCOST_ROUNDS rounds (3 unless set):
//
//   - floor: internal/bench's floor, COPY of four columns into a minimal
//     table with one partial index;
//   - enqueue: Store.Enqueue, the whole batch enqueue;
//   - rows: COPY of the rows Store.Enqueue copies (copyColumns, the same
//     values) into backstop_tasks, without the event row or the counts;
//   - rows_pgx: the same rows by pgx's CopyFrom of Go values (row.args);
//   - rows_narrow: by pgx's CopyFrom too, only the columns whose values
//     differ from the table's defaults (11 of 25);
//   - rows_notrig: the same with backstop_tasks' triggers disabled;
//   - rows_no_<index>: the same without that index (dropped for the
//     variant, made again after it);
//   - rows_pkey_only: the same with no index but the primary key.
//
// Per variant: the wall time, the backend's CPU time (from
// /proc/<pid>/schedstat: the server must run on this machine), the
// test's own CPU time (the client's row building and encoding) and the
// WAL bytes (pg_current_wal_lsn before and after: exact only when
// nothing else writes to the server), each per batch.
// BACKSTOP_ENQCOST_VARIANTS (space-separated names) runs only those. With
// pg_stat_statements loaded, each variant's statements follow.
// BACKSTOP_ENQCOST_PAYLOAD is every task's payload, and the floor's rows'
// ({} unless set).
func TestEnqueueCost(t *testing.T) {
	u := os.Getenv("BACKSTOP_ENQCOST_URL")
	if u == "" {
		t.Skip("BACKSTOP_ENQCOST_URL is not set")
	}
	env := func(name string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
			return v
		}
		return def
	}
	batches, rounds := env("BACKSTOP_ENQCOST_BATCHES", 100), env("BACKSTOP_ENQCOST_ROUNDS", 3)
	payload := os.Getenv("BACKSTOP_ENQCOST_PAYLOAD")
	if payload == "" {
		payload = `{}`
	}
	ctx := t.Context()
	if !strings.Contains(u, "pool_max_conns") {
		u += map[bool]string{true: "&", false: "?"}[strings.Contains(u, "?")] + "pool_max_conns=1"
	}
	s, err := Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string) {
		t.Helper()
		if _, err := s.pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	var pid int
	if err := s.pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	var statements bool
	if err := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'pg_stat_statements')").Scan(&statements); err != nil {
		t.Fatal(err)
	}
	exec(`DROP TABLE IF EXISTS floor_tasks; CREATE TABLE floor_tasks (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, queue text NOT NULL, kind text NOT NULL, state text NOT NULL DEFAULT 'pending',
	priority int NOT NULL DEFAULT 0, run_at timestamptz NOT NULL, attempt int NOT NULL DEFAULT 0, payload jsonb,
	lease_expires_at timestamptz, finalized_at timestamptz);
CREATE INDEX ON floor_tasks (queue, priority DESC, run_at, id) WHERE state = 'pending'`)
	defer s.pool.Exec(ctx, "DROP TABLE floor_tasks") //nolint:errcheck
	var indexes []string
	defs := map[string]string{}
	rs, err := s.pool.Query(ctx, `SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index
	WHERE indrelid = 'backstop_tasks'::regclass AND NOT indisprimary ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var name, def string
		if err := rs.Scan(&name, &def); err != nil {
			t.Fatal(err)
		}
		indexes, defs[name] = append(indexes, name), def
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}

	cpu := func() int64 { return backendCPU(t, pid) }
	self := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	lsn := func() int64 {
		var b int64
		if err := s.pool.QueryRow(ctx, "SELECT pg_current_wal_lsn() - '0/0'").Scan(&b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	tasks := func(queue string) []*bt.Task {
		now := time.Now().UTC()
		ts := make([]*bt.Task, 1000)
		for i := range ts {
			ts[i] = &bt.Task{ID: uuid.Must(uuid.NewV7()).String(), Queue: queue, Kind: "noop", State: bt.StatePending,
				MaxAttempts: 25, Payload: json.RawMessage(payload), RunAt: now, CreatedAt: now, UpdatedAt: now}
		}
		return ts
	}
	// copyBatch copies ts's rows as copyTasks does (copyRows), or with
	// pgx's CopyFrom of a row of Go values per task (row.args).
	copyBatch := func(ts []*bt.Task, viaPgx bool) {
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		batch := make([]row, len(ts))
		for i, task := range ts {
			if batch[i], err = newRow(task, 0); err != nil {
				t.Fatal(err)
			}
		}
		if viaPgx {
			rows := make([][]any, len(ts))
			for i, r := range batch {
				rows[i] = append(r.args(make([]any, 0, len(copyColumns))), []int64{1})
			}
			_, err = tx.CopyFrom(ctx, pgx.Identifier{"backstop_tasks"}, copyColumns, pgx.CopyFromRows(rows))
		} else {
			var data []byte
			if data, err = copyRows(nil, batch, 1); err == nil {
				err = pgxTx{tx}.copyFrom(ctx, data)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	type variant struct {
		name        string
		before      func()
		batch       func(queue string)
		after       func()
		floorTables bool
	}
	rowsWithout := func(name string, drop ...string) variant {
		return variant{name: name, batch: func(q string) { copyBatch(tasks(q), false) },
			before: func() {
				for _, ix := range drop {
					exec("DROP INDEX " + ix)
				}
			},
			after: func() {
				for _, ix := range drop {
					exec(defs[ix])
				}
			}}
	}
	variants := []variant{
		{name: "floor", floorTables: true, batch: func(string) {
			now := time.Now()
			rows := make([][]any, 1000)
			for i := range rows {
				rows[i] = []any{"floor", "noop", now, payload}
			}
			if _, err := s.pool.CopyFrom(ctx, pgx.Identifier{"floor_tasks"}, []string{"queue", "kind", "run_at", "payload"},
				pgx.CopyFromRows(rows)); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "enqueue", batch: func(q string) {
			if _, err := s.Enqueue(ctx, tasks(q), store.EnqueueOpts{InlineLimit: 64 << 10}); err != nil {
				t.Fatal(err)
			}
		}},
		rowsWithout("rows"),
		{name: "rows_pgx", batch: func(q string) { copyBatch(tasks(q), true) }},
		{name: "rows_narrow", batch: func(q string) {
			// Only the columns whose values differ from the table's
			// defaults for these tasks, by pgx's CopyFrom.
			cols := []string{"id", "queue", "kind", "state", "max_attempts", "payload", "payload_size", "run_at", "created_at", "updated_at", "event_links"}
			ts := tasks(q)
			rows := make([][]any, len(ts))
			for i, tk := range ts {
				rows[i] = []any{tk.ID, tk.Queue, tk.Kind, string(tk.State), tk.MaxAttempts, string(tk.Payload), len(tk.Payload),
					tk.RunAt, tk.CreatedAt, tk.UpdatedAt, []int64{1}}
			}
			if _, err := s.pool.CopyFrom(ctx, pgx.Identifier{"backstop_tasks"}, cols, pgx.CopyFromRows(rows)); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "rows_notrig", batch: func(q string) { copyBatch(tasks(q), false) },
			before: func() { exec("ALTER TABLE backstop_tasks DISABLE TRIGGER USER") },
			after:  func() { exec("ALTER TABLE backstop_tasks ENABLE TRIGGER USER") }},
	}
	for _, ix := range indexes {
		variants = append(variants, rowsWithout("rows_no_"+strings.TrimPrefix(ix, "backstop_tasks_"), ix))
	}
	variants = append(variants, rowsWithout("rows_pkey_only", indexes...))
	if only := os.Getenv("BACKSTOP_ENQCOST_VARIANTS"); only != "" {
		variants = slices.DeleteFunc(variants, func(v variant) bool { return !slices.Contains(strings.Fields(only), v.name) })
	}

	type total struct{ wall, server, client, wal []float64 }
	totals := map[string]*total{}
	for r := range rounds {
		for _, v := range variants {
			exec("TRUNCATE backstop_tasks CASCADE; TRUNCATE floor_tasks; CHECKPOINT")
			if v.before != nil {
				v.before()
			}
			if statements {
				exec("SELECT pg_stat_statements_reset()")
			}
			queue := "cost-" + uuid.NewString()[:8]
			w0, c0, s0, l0 := time.Now(), cpu(), self(), lsn()
			first := 0.0
			for b := range batches {
				v.batch(queue)
				if b == 0 {
					first = float64(cpu()-c0) / 1e3
				}
			}
			wall, server, client, wal := time.Since(w0), cpu()-c0, self()-s0, lsn()-l0
			n := float64(batches)
			tt := totals[v.name]
			if tt == nil {
				tt = &total{}
				totals[v.name] = tt
			}
			tt.wall = append(tt.wall, wall.Seconds()*1e3/n)
			tt.server = append(tt.server, float64(server)/1e6/n)
			tt.client = append(tt.client, client.Seconds()*1e3/n)
			tt.wal = append(tt.wal, float64(wal)/n/1000)
			fmt.Printf("round=%d variant=%s batches=%d wall_ms/batch=%.2f server_cpu_ms/batch=%.2f first_batch_server_cpu_ms=%.2f client_cpu_ms/batch=%.2f wal_B/row=%.0f\n",
				r, v.name, batches, tt.wall[r], tt.server[r], first/1e3, tt.client[r], tt.wal[r])
			if statements {
				srs, err := s.pool.Query(ctx, `SELECT calls, total_exec_time, wal_bytes, left(regexp_replace(query, '\s+', ' ', 'g'), 90)
	FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%schedstat%'
	ORDER BY total_exec_time DESC LIMIT 6`)
				if err != nil {
					t.Fatal(err)
				}
				for srs.Next() {
					var calls int64
					var ms, walB float64
					var q string
					if err := srs.Scan(&calls, &ms, &walB, &q); err != nil {
						t.Fatal(err)
					}
					fmt.Printf("    calls=%d ms/call=%.3f wal_B/call=%.0f %s\n", calls, ms/float64(calls), walB/float64(calls), q)
				}
				srs.Close()
			}
			if v.after != nil {
				v.after()
			}
		}
	}
	med := func(xs []float64) float64 {
		ys := slices.Clone(xs)
		slices.Sort(ys)
		return ys[len(ys)/2]
	}
	for _, v := range variants {
		tt := totals[v.name]
		fmt.Printf("median variant=%s wall_ms/batch=%.2f server_cpu_ms/batch=%.2f client_cpu_ms/batch=%.2f wal_B/row=%.0f\n",
			v.name, med(tt.wall), med(tt.server), med(tt.client), med(tt.wal))
	}
}
