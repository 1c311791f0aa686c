package pgstore

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// hotStep is one step of the ladder from the floor's two statements to the
// drain's: a claim of $3 tasks of queue $1 at $2 (by worker $4, leased
// until $5), and a success settle of the running tasks ($1 ids, $2
// execution ids, $3 finish times, $4–$6 progress, $7 the actor); each
// statement takes the first parameters it names. noTriggers runs both with
// the user triggers off (session_replication_role = replica).
type hotStep struct {
	name          string
	claim, settle string
	noTriggers    bool
}

// hotLadder builds each step from the store's own statement pieces, so
// that the last step is the store's claim and success settle.
func hotLadder() []hotStep {
	// The floor's two statements (floorClaim, floorDone) on backstop_tasks.
	const fc = `WITH picked AS (SELECT id FROM backstop_tasks WHERE state = 'pending' AND queue = $1 AND run_at <= $2
	ORDER BY priority DESC, run_at, id LIMIT $3 FOR UPDATE SKIP LOCKED)
UPDATE backstop_tasks t SET state = 'running', attempt = t.attempt + 1, lease_expires_at = $2::timestamptz + interval '1 minute'
WHERE t.id = ANY(ARRAY(SELECT id FROM picked)) RETURNING t.id`
	const fs = `UPDATE backstop_tasks SET state = 'succeeded', finalized_at = now(), lease_expires_at = NULL
WHERE id = ANY($1) AND state = 'running'`

	// The claim: Backstop's pick (claimPickRows: by ctid, the deadline,
	// the paused queues), then its SET list, then RETURNING every column
	// read by the client, then the task.claimed row, then its own count.
	pick := "WITH picked AS (\n\t" + strings.Replace(claimPickRows, "%s", "", 1) + "\n)"
	pickFloorSet := pick + `
UPDATE backstop_tasks c SET state = 'running', attempt = c.attempt + 1, lease_expires_at = $2::timestamptz + interval '1 minute'
WHERE c.ctid = ANY(ARRAY(SELECT tid FROM picked)) RETURNING c.id`
	claimWhole := strings.NewReplacer("%s", "", "%e", execIDs).Replace(claimPick)
	const ret = "RETURNING c.*, s.seq AS ev_seq\n), "
	claimHead := claimWhole[:strings.Index(claimWhole, ret)]
	claimSet := claimHead + "RETURNING c.id\n)\nSELECT id FROM claimed"
	claimRet := claimHead + strings.TrimSuffix(ret, ", ") + "\nSELECT " + taskCols("t") + " FROM claimed t"
	claimEv := strings.Replace(claimWhole, "%c", "", 1) + "SELECT " + taskCols("t") + " FROM claimed t"

	// The settle: Backstop's input (six arrays, joined by id on the
	// floor's condition: the floor's claim writes no execution id), then
	// its lease condition and SET list, then its RETURNING list, then its
	// two event rows, then its own count.
	settleWhole := settleSucceededSQL
	input := settleWhole[:strings.Index(settleWhole, "), "+settleLink)] + ")"
	settleFloorSet := input + `, settled AS (
	UPDATE backstop_tasks t SET state = 'succeeded', finalized_at = i.finished_at, lease_expires_at = NULL
	FROM input i WHERE t.id = i.task_id AND t.state = 'running'
	RETURNING i.idx
)
SELECT idx FROM settled`
	const sret = "\tRETURNING i.idx, t.id"
	settleHead := settleWhole[:strings.Index(settleWhole, sret)]
	settleSet := settleHead + "\tRETURNING i.idx\n)\nSELECT idx FROM settled"
	settleRet := settleWhole[:strings.Index(settleWhole, "), "+succeededEvents)] + ")\nSELECT idx FROM settled"
	settleEv := strings.Replace(settleWhole, "%c", "", 1)

	return []hotStep{
		{name: "floor-stmts-on-tasks-no-triggers", claim: fc, settle: fs, noTriggers: true},
		{name: "floor-stmts-on-tasks", claim: fc, settle: fs},
		{name: "pick-and-input", claim: pickFloorSet, settle: settleFloorSet},
		{name: "set-lists", claim: claimSet, settle: settleSet},
		{name: "returning", claim: claimRet, settle: settleRet},
		{name: "events", claim: claimEv, settle: settleEv},
		{name: "store", claim: sqlClaim, settle: sqlSettleSucceeded},
		{name: "store-no-triggers", claim: sqlClaim, settle: sqlSettleSucceeded, noTriggers: true},
	}
}

// paramRef finds a statement's parameters.
var paramRef = regexp.MustCompile(`\$(\d+)`)

// firstArgs is the first arguments of args, as many as sql names.
func firstArgs(sql string, args ...any) []any {
	n := 0
	for _, m := range paramRef.FindAllStringSubmatch(sql, -1) {
		if k, _ := strconv.Atoi(m[1]); k > n {
			n = k
		}
	}
	return args[:n]
}

// TestHotPathLadder measures where the drain's server CPU goes between the
// floor's two statements and the store's (docs/benchmarks.md): on the
// database BACKSTOP_HOTPATH_LADDER_URL (migrated, newest schema; skipped
// without it), 150,000 tasks enqueued by Store.Enqueue in a fresh queue,
// then rounds of a claim of 1,000 and its settle for every step of
// hotLadder in turn (the order rotating each round), and the floor's
// statements on floor_tasks; measured as TestHotPathCost measures, one
// line a step and round. Then the floor's statements and the store's
// with every index of backstop_tasks but the primary key and the claim
// index dropped: the database is left without them, drop it after.
func TestHotPathLadder(t *testing.T) {
	u := os.Getenv("BACKSTOP_HOTPATH_LADDER_URL")
	if u == "" {
		t.Skip("BACKSTOP_HOTPATH_LADDER_URL is not set")
	}
	ctx := t.Context()
	s, err := Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	steps := hotLadder()
	rounds := 18
	queue := "ladder-" + uuid.NewString()[:8]
	hotTasks(t, s, queue, rounds*len(steps)+3*10)
	floorTable(t, s)
	defer s.pool.Exec(ctx, "DROP TABLE floor_tasks") //nolint:errcheck
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	set := func(sql string) {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	const n = 1000
	pair := func(r int, st hotStep) {
		if st.noTriggers {
			set("SET session_replication_role = replica")
			defer set("SET session_replication_role = DEFAULT")
		}
		at := time.Now()
		claimed := measureHot(t, conn, pid, st.claim, firstArgs(st.claim, queue, at, n, "hotpath", at.Add(time.Minute))...)
		rows, err := conn.Query(ctx, "SELECT id, execution_id FROM backstop_tasks WHERE queue = $1 AND state = 'running'", queue)
		if err != nil {
			t.Fatal(err)
		}
		var ids, execs []string
		for rows.Next() {
			var id string
			var ex *string
			if err := rows.Scan(&id, &ex); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
			execs = append(execs, "")
			if ex != nil {
				execs[len(execs)-1] = *ex
			}
		}
		rows.Close()
		m := len(ids)
		done := make([]time.Time, m)
		for i := range done {
			done[i] = time.Now()
		}
		settled := measureHot(t, conn, pid, st.settle, firstArgs(st.settle, textArray(ids), textArray(execs), timeArray(done),
			make([]bool, m), make([]int32, m), make([]int32, m), "")...)
		var left int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM backstop_tasks WHERE queue = $1 AND state = 'running'", queue).Scan(&left); err != nil || left != 0 {
			t.Fatalf("%s: %d tasks left running (%v)", st.name, left, err)
		}
		printHotLine(r, st.name, m, claimed, settled)
	}
	floorPair := func(r int, name string) {
		claimed := measureHot(t, conn, pid, floorClaim, n)
		ids := floorRunning(t, conn)
		printHotLine(r, name, len(ids), claimed, measureHot(t, conn, pid, floorDone, ids))
	}
	for r := range rounds {
		for k := range steps {
			pair(r, steps[(k+r)%len(steps)])
		}
		floorPair(r, "floor")
	}

	// Then the same with every index of backstop_tasks but the primary key
	// and the claim index dropped, for good: the database is the ladder's.
	var drop []string
	rows, err := conn.Query(ctx, `SELECT indexrelid::regclass::text FROM pg_index
		WHERE indrelid = 'backstop_tasks'::regclass AND indexrelid::regclass::text NOT IN ('backstop_tasks_pkey', 'backstop_tasks_claim')`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		drop = append(drop, name)
	}
	rows.Close()
	set("DROP INDEX " + strings.Join(drop, ", "))
	fmt.Printf("dropped: %s\n", strings.Join(drop, " "))
	for r := range 10 {
		for _, st := range []hotStep{steps[0], steps[1], steps[len(steps)-2]} {
			st.name += "-2-indexes"
			pair(r, st)
		}
	}
}
