package pgstore

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// TestHotPathCost measures what the drain's two statements cost the
// server, batch by batch, on the databases named by BACKSTOP_HOTPATH_URLS
// (space-separated, each already migrated; skipped without it): 100,000
// tasks enqueued in a fresh queue of each, then 40 rounds, each claiming
// 1,000 tasks (BACKSTOP_HOTPATH_BATCH: another batch size, 10 for one
// caller's claim) (sqlClaim) and settling them (sqlSettleSucceeded) in every
// database in turn, then the same with the floor's two statements on a
// minimal table (floor_tasks, in the first database; as internal/bench's
// floor). Every statement runs under EXPLAIN (ANALYZE, BUFFERS, WAL) on
// one connection, whose backend's CPU time is read from
// /proc/<pid>/schedstat around it (so the server must run on this
// machine): CPU time, buffers and WAL records do not depend on the load
// of the box as the wall time does. A URL may end in #<version>: its
// database is at that older schema version, and the statements run in
// that version's forms (forms.go). A line per statement pair; the
// medians are docs/benchmarks.md's. BACKSTOP_HOTPATH_PLANS=1 also prints
// every plan (JSON).
func TestHotPathCost(t *testing.T) {
	urls := strings.Fields(os.Getenv("BACKSTOP_HOTPATH_URLS"))
	if len(urls) == 0 {
		t.Skip("BACKSTOP_HOTPATH_URLS is not set")
	}
	ctx := t.Context()
	queue := "hotpath-" + uuid.NewString()[:8]
	type db struct {
		s    *Store
		conn *pgxpool.Conn
		pid  int
	}
	var dbs []db
	for _, u := range urls {
		u, version, _ := strings.Cut(u, "#")
		s, err := Open(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if version != "" {
			v, err := strconv.ParseInt(version, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			s.schemaAt.Store(v)
		}
		hotTasks(t, s, queue, 100)
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		d := db{s: s, conn: c}
		if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&d.pid); err != nil {
			t.Fatal(err)
		}
		dbs = append(dbs, d)
	}
	measure := func(d db, sql string, args ...any) hotCost { return measureHot(t, d.conn, d.pid, sql, args...) }
	line := printHotLine
	floor := dbs[0]
	floorTable(t, floor.s)
	defer floor.s.pool.Exec(ctx, "DROP TABLE floor_tasks") //nolint:errcheck
	n := 1000
	if b := os.Getenv("BACKSTOP_HOTPATH_BATCH"); b != "" {
		var err error
		if n, err = strconv.Atoi(b); err != nil || n < 1 || n > 2500 {
			t.Fatalf("BACKSTOP_HOTPATH_BATCH=%q: want a number of tasks from 1 to 2500", b)
		}
	}
	for r := range 40 {
		for k, d := range dbs {
			at := time.Now()
			claimed := measure(d, d.s.hot(sqlClaim), queue, at, n, "hotpath", at.Add(time.Minute))
			rows, err := d.s.pool.Query(ctx, "SELECT id, execution_id FROM backstop_tasks WHERE queue = $1 AND state = 'running'", queue)
			if err != nil {
				t.Fatal(err)
			}
			var ids, execs []string
			for rows.Next() {
				var id, ex string
				if err := rows.Scan(&id, &ex); err != nil {
					t.Fatal(err)
				}
				ids, execs = append(ids, id), append(execs, ex)
			}
			rows.Close()
			m := len(ids)
			done := make([]time.Time, m)
			for i := range done {
				done[i] = time.Now()
			}
			settled := measure(d, d.s.hot(sqlSettleSucceeded), textArray(ids), textArray(execs), timeArray(done),
				make([]bool, m), make([]int32, m), make([]int32, m), "")
			line(r, fmt.Sprint(k), m, claimed, settled)
		}
		claimed := measure(floor, floorClaim, n)
		ids := floorRunning(t, floor.conn)
		line(r, "floor", len(ids), claimed, measure(floor, floorDone, ids))
	}
}

// floorRunning is the ids of the floor table's running tasks: what its
// complete settles after its claim.
func floorRunning(t *testing.T, conn *pgxpool.Conn) []int64 {
	rows, err := conn.Query(t.Context(), "SELECT id FROM floor_tasks WHERE state = 'running'")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// hotCost is what one statement cost the server: its plan's buffers and
// WAL, its execution time, and its backend's CPU time.
type hotCost struct {
	Plan struct {
		Hit  int64 `json:"Shared Hit Blocks"`
		WalR int64 `json:"WAL Records"`
		WalB int64 `json:"WAL Bytes"`
	} `json:"Plan"`
	Exec  float64 `json:"Execution Time"`
	CPUus int64   `json:"-"`
}

// backendCPU is the CPU time (ns) of the server process pid so far.
func backendCPU(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		t.Fatal(err)
	}
	var ns int64
	fmt.Sscan(string(b), &ns)
	return ns
}

// measureHot runs sql under EXPLAIN (ANALYZE, BUFFERS, WAL) on conn,
// whose backend is pid, and reads what it cost.
func measureHot(t *testing.T, conn *pgxpool.Conn, pid int, sql string, args ...any) hotCost {
	var raw string
	c0 := backendCPU(t, pid)
	if err := conn.QueryRow(t.Context(), "EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) "+sql, args...).Scan(&raw); err != nil {
		t.Fatalf("%v\n%s", err, sql)
	}
	var c []hotCost
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		t.Fatal(err)
	}
	c[0].CPUus = (backendCPU(t, pid) - c0) / 1000
	if os.Getenv("BACKSTOP_HOTPATH_PLANS") != "" {
		fmt.Printf("plan pid=%d: %s\n", pid, raw)
	}
	return c[0]
}

// printHotLine prints a claim and settle pair's costs: a line of the output
// docs/benchmarks.md's medians are taken from.
func printHotLine(r int, name string, n int, claim, settle hotCost) {
	fmt.Printf("round=%d db=%s n=%d claim_ms=%.1f claim_cpu=%d claim_hit=%d claim_walrec=%d claim_walB=%d | "+
		"settle_ms=%.1f settle_cpu=%d settle_hit=%d settle_walrec=%d settle_walB=%d\n",
		r, name, n, claim.Exec, claim.CPUus, claim.Plan.Hit, claim.Plan.WalR, claim.Plan.WalB,
		settle.Exec, settle.CPUus, settle.Plan.Hit, settle.Plan.WalR, settle.Plan.WalB)
}

// floorTable creates floor_tasks in s's database: internal/bench's floor,
// 100,000 pending rows of a minimal table with one claim index. The
// caller drops it.
func floorTable(t *testing.T, s *Store) {
	ctx := t.Context()
	if _, err := s.pool.Exec(ctx, `DROP TABLE IF EXISTS floor_tasks; CREATE TABLE floor_tasks (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, queue text NOT NULL, kind text NOT NULL, state text NOT NULL DEFAULT 'pending',
	priority int NOT NULL DEFAULT 0, run_at timestamptz NOT NULL, attempt int NOT NULL DEFAULT 0, payload jsonb,
	lease_expires_at timestamptz, finalized_at timestamptz);
CREATE INDEX ON floor_tasks (queue, priority DESC, run_at, id) WHERE state = 'pending';
INSERT INTO floor_tasks (queue, kind, run_at, payload) SELECT 'floor', 'noop', now(), '{}' FROM generate_series(1, 100000)`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, "VACUUM ANALYZE floor_tasks"); err != nil {
		t.Fatal(err)
	}
}

// The floor's two statements (internal/bench): claim $1 rows of
// floor_tasks, complete the ids $1.
const (
	floorClaim = `WITH picked AS (SELECT id FROM floor_tasks WHERE state = 'pending' AND queue = 'floor' AND run_at <= now()
	ORDER BY priority DESC, run_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
UPDATE floor_tasks t SET state = 'running', attempt = t.attempt + 1, lease_expires_at = now() + interval '1 minute'
WHERE t.id = ANY(ARRAY(SELECT id FROM picked)) RETURNING t.id`
	floorDone = `UPDATE floor_tasks SET state = 'succeeded', finalized_at = now(), lease_expires_at = NULL
WHERE id = ANY($1) AND state = 'running'`
)

// hotTasks enqueues batches of 1,000 pending tasks of queue (Store.Enqueue:
// every index and trigger of backstop_tasks) and vacuums the table.
func hotTasks(t *testing.T, s *Store, queue string, batches int) {
	ctx := t.Context()
	now := time.Now().UTC()
	for range batches {
		tasks := make([]*bt.Task, 1000)
		for i := range tasks {
			tasks[i] = &bt.Task{ID: uuid.Must(uuid.NewV7()).String(), Queue: queue, Kind: "noop", State: bt.StatePending,
				MaxAttempts: 25, Payload: json.RawMessage(`{}`), RunAt: now, CreatedAt: now, UpdatedAt: now}
		}
		if _, err := s.Enqueue(ctx, tasks, store.EnqueueOpts{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.pool.Exec(ctx, "VACUUM ANALYZE backstop_tasks"); err != nil {
		t.Fatal(err)
	}
}
