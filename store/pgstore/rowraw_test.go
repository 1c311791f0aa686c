package pgstore

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
)

// onlyScan hides a pgx row's raw values: scanTask reads it through Scan.
type onlyScan struct{ r pgx.Rows }

func (o onlyScan) Scan(dest ...any) error { return o.r.Scan(dest...) }

// TestDecodeRawMatchesScan: a task row decoded from its raw values
// (decodeRaw) is the task pgx's Scan gives, for rows holding every kind of
// value: each optional column set and unset, times before and after
// 2000-01-01 (PostgreSQL's epoch) and far from it, JSON and JSONB, a
// spilled payload and a summary without one; an infinite time is an error
// either way. And a claim's rows do take the raw path.
func TestDecodeRawMatchesScan(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, testdb.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	var tasks []*bt.Task
	for i := range 6 {
		tasks = append(tasks, &bt.Task{ID: fmt.Sprintf("raw-%d", i), Queue: "raw", Kind: "k", State: bt.StatePending,
			MaxAttempts: 3, Payload: json.RawMessage(`{"a": 1}`), RunAt: at, CreatedAt: at, UpdatedAt: at})
	}
	tasks[1].Attributes = map[string]string{"run_id": "r1", "x": "ü"}
	tasks[1].Retry = &bt.RetryPolicy{}
	tasks[1].IdempotencyKey, tasks[1].TraceParent = "idem-1", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	dl := at.Add(time.Hour)
	tasks[1].Deadline, tasks[1].Timeout = &dl, bt.Duration(90*time.Second)
	if _, err := s.Enqueue(ctx, tasks, store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := s.pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	// Every optional column of raw-2 set, times around PostgreSQL's epoch.
	exec(`UPDATE backstop_tasks SET priority = -7, attempt = 2, merge_key = 'm', merge_count = 4,
		progress_total = 10, progress_completed = 3, complexity = 2.5, last_error = 'boom', worker_id = 'w',
		execution_id = 'e-2', attempted_at = '1999-12-31 23:59:59.999999+00', lease_expires_at = '2000-01-01 00:00:00.000001+00',
		cancel_requested_at = '1970-01-01 00:00:00+00', finalized_at = '1900-06-15 12:00:00.5+00', dead_reason = 'poison',
		first_seen = '2262-04-11 23:47:16.854775+00', last_seen = '0100-01-01 00:00:00+00', dead_count = 1, replay_count = 2,
		dlq_status = 'open', replayed_from = 'raw-0', unique_until = $1, run_at = '1999-01-01 00:00:00.000001+00'
		WHERE id = 'raw-2'`, at)
	// raw-3's payload spilled to the side table.
	exec(`UPDATE backstop_tasks SET payload_spilled = true, payload = NULL WHERE id = 'raw-3'`)
	exec(`INSERT INTO backstop_payloads (task_id, data) VALUES ('raw-3', '\x7b2262223a327d')`)

	read := func(sql string, raw bool) ([]*bt.Task, error) {
		rows, err := s.pool.Query(ctx, sql)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []*bt.Task
		for rows.Next() {
			var r scanner = rows
			if !raw {
				r = onlyScan{rows}
			} else if sc := (&taskScan{dest: taskScans.New().(*taskScan).dest}); !sc.rawLayout(rows.FieldDescriptions()) {
				t.Fatalf("%s: the rows' layout is not decoded raw", sql)
			}
			tk, err := scanTask(r)
			if err != nil {
				return nil, err
			}
			out = append(out, tk)
		}
		return out, rows.Err()
	}
	for _, sql := range []string{
		selectTasks + " WHERE t.queue = 'raw' ORDER BY t.id",
		"SELECT " + summaryCols("t") + " FROM backstop_tasks t WHERE t.queue = 'raw' ORDER BY t.id",
	} {
		viaScan, err := read(sql, false)
		if err != nil {
			t.Fatal(err)
		}
		viaRaw, err := read(sql, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(viaRaw) != 6 || !reflect.DeepEqual(viaRaw, viaScan) {
			for i := range min(len(viaRaw), len(viaScan)) {
				if !reflect.DeepEqual(viaRaw[i], viaScan[i]) {
					t.Errorf("%s\nrow %d raw:  %+v\nrow %d scan: %+v", sql, i, *viaRaw[i], i, *viaScan[i])
				}
			}
			t.Fatalf("raw decode differs from Scan (%d and %d rows)", len(viaRaw), len(viaScan))
		}
		if viaRaw[2].AttemptedAt == nil || viaRaw[2].AttemptedAt.Location() != time.UTC {
			t.Errorf("times not in UTC: %v", viaRaw[2].AttemptedAt)
		}
	}

	// The claim's RETURNING rows are read raw.
	rows, err := s.pool.Query(ctx, s.hot(sqlClaim), "raw", at.Add(time.Hour), 10, "w-raw", at.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if sc := (&taskScan{dest: taskScans.New().(*taskScan).dest}); !sc.rawLayout(rows.FieldDescriptions()) {
		t.Error("the claim's rows are not decoded raw")
	}
	claimed := 0
	for rows.Next() {
		if _, err := scanTask(rows); err != nil {
			t.Fatal(err)
		}
		claimed++
	}
	rows.Close()
	if err := rows.Err(); err != nil || claimed == 0 {
		t.Fatalf("claim: %d rows, %v", claimed, err)
	}

	exec(`UPDATE backstop_tasks SET deadline = 'infinity' WHERE id = 'raw-4'`)
	for _, raw := range []bool{false, true} {
		if _, err := read(selectTasks+" WHERE t.id = 'raw-4'", raw); err == nil {
			t.Errorf("raw %v: an infinite deadline read without an error", raw)
		}
	}
	exec(`UPDATE backstop_tasks SET run_at = '-infinity' WHERE id = 'raw-4'`)
	for _, raw := range []bool{false, true} {
		if _, err := read(selectTasks+" WHERE t.id = 'raw-4'", raw); err == nil {
			t.Errorf("raw %v: an infinite run_at read without an error", raw)
		}
	}
}

// BenchmarkScanTaskRows reads 1,000 task rows a round through Scan and
// through their raw values (the round trip and the server's part are the
// same in both: compare client-cpu-ns/row, this process's CPU).
func BenchmarkScanTaskRows(b *testing.B) {
	ctx := b.Context()
	s, err := Open(ctx, testdb.Postgres(b))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var tasks []*bt.Task
	for i := range 1000 {
		tasks = append(tasks, &bt.Task{ID: fmt.Sprintf("bench-%04d", i), Queue: "bq", Kind: "k", State: bt.StatePending,
			MaxAttempts: 3, Payload: json.RawMessage(`{}`), RunAt: at, CreatedAt: at, UpdatedAt: at})
	}
	if _, err := s.Enqueue(ctx, tasks, store.EnqueueOpts{}); err != nil {
		b.Fatal(err)
	}
	if _, err := s.Claim(ctx, store.ClaimParams{Queue: "bq", WorkerID: "w-bq", Max: 1000, Now: at, Lease: time.Hour}); err != nil {
		b.Fatal(err)
	}
	q := selectTasks + " WHERE t.queue = 'bq'"
	for _, raw := range []bool{false, true} {
		b.Run(fmt.Sprintf("raw=%v", raw), func(b *testing.B) {
			cpu0 := processCPU()
			for b.Loop() {
				rows, err := s.pool.Query(ctx, q)
				if err != nil {
					b.Fatal(err)
				}
				for rows.Next() {
					var r scanner = rows
					if !raw {
						r = onlyScan{rows}
					}
					if _, err := scanTask(r); err != nil {
						b.Fatal(err)
					}
				}
				rows.Close()
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/1000, "client-cpu-ns/row")
		})
	}
}
