package sqlitestore

import (
	"context"
	"database/sql"
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

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// A planning measurement, not a product path: what the floor's claim and
// complete and Backstop's claim and success settle would cost on other
// designs of the task table (docs/benchmarks.md, "A narrow hot table"),
// built as scratch tables in the store's file from backstop_tasks' rows.
// Every table shares backstop_tasks' row ids, so a hot row and its wide
// (or cold) row are found by the same row id.

// narrowCold is the vertical split's cold side (design b): the columns no
// claim, settle, heartbeat, retry or death writes and no claim picks by.
var narrowCold = []string{
	"payload", "payload_spilled", "attributes", "retry_policy", "idempotency_key", "merge_key", "merge_count",
	"trace_parent", "created_at", "complexity", "unique_until", "debounce_for_us", "debounce_until",
	"replayed_from", "replay_count",
}

// narrowHotCols is the narrow hot table's columns after its key (designs
// c, d, e).
const narrowHotCols = "queue, kind, state, priority, run_at, deadline, attempt, worker_id, execution_id, attempted_at, lease_expires_at, event_seqs"

// narrowLoopDesign is one design's tables and its claim and settle, each
// in a transaction of its own as the store's.
type narrowLoopDesign struct {
	name       string
	setup      []string
	hot, wide  string // wide: the cold side (b), the wide row (c, d, e)
	key        string // the hot table's claim order's last column
	out        string // (d): the outcome table
	settleKind byte   // 'u': update the hot row; 'c': delete it, update the wide row; 'd': delete it, insert the outcome
}

// nlTx runs f in a transaction of db.
func nlTx(ctx context.Context, db *sql.DB, f func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// nlCPU is this process's CPU time so far.
func nlCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// nlList is ids as a JSON array.
func nlList(ids []int64) string {
	b := []byte{'['}
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(append(b, ']'))
}

// TestNarrowLoop measures, in the SQLite file BACKSTOP_NARROW_LOOP_DB
// (created afresh; skipped without it), the store-loop way of
// docs/benchmarks.md's branch sqlite2: 100,000 tasks enqueued by
// Store.Enqueue, copied into each design's scratch tables, then rounds,
// each running on every design, in a rotating order, the floor's claim of
// 1,000 and its complete, and Backstop's claim and success settle of
// them (the pick, SET list, what the worker reads; then also the event
// rows and the counts, the store's own functions; on design a the
// store's claimTx and Settle), each a transaction of the writer; and the floor's statements on its own
// 10-column table. A line per pair: the process's CPU (getrusage) and
// the WAL frames the pair wrote (autocheckpoint off, the WAL truncated
// before each pair).
func TestNarrowLoop(t *testing.T) {
	path := os.Getenv("BACKSTOP_NARROW_LOOP_DB")
	if path == "" {
		t.Skip("BACKSTOP_NARROW_LOOP_DB is not set")
	}
	for _, sfx := range []string{"", "-wal", "-shm"} {
		os.Remove(path + sfx)
	}
	ctx := t.Context()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	rounds := 15
	if r := os.Getenv("BACKSTOP_NARROW_ROUNDS"); r != "" {
		fmt.Sscan(r, &rounds)
	}
	queue := "narrow-" + uuid.NewString()[:8]
	now := time.Now().UTC()
	for range 100 {
		tasks := make([]*bt.Task, 1000)
		for i := range tasks {
			tasks[i] = &bt.Task{ID: uuid.Must(uuid.NewV7()).String(), Queue: queue, Kind: "noop", State: bt.StatePending,
				MaxAttempts: 25, Payload: json.RawMessage(`{}`), RunAt: now, CreatedAt: now, UpdatedAt: now}
		}
		if _, err := s.Enqueue(ctx, tasks, store.EnqueueOpts{}); err != nil {
			t.Fatal(err)
		}
	}
	db := s.w
	exec := func(q string, args ...any) {
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var cols []string
	rows, err := db.QueryContext(ctx, "SELECT name FROM pragma_table_info('backstop_tasks') ORDER BY cid")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, c)
	}
	rows.Close()
	idx := map[string]string{}
	rows, err = db.QueryContext(ctx, "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'backstop_tasks' AND sql IS NOT NULL")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n, q string
		if err := rows.Scan(&n, &q); err != nil {
			t.Fatal(err)
		}
		idx[n] = q
	}
	rows.Close()
	indexOn := func(name, table string) string {
		return strings.Replace(strings.Replace(idx[name], name, table+"_"+strings.TrimPrefix(name, "backstop_tasks_"), 1),
			" ON backstop_tasks ", " ON "+table+" ", 1)
	}
	hotIdx := []string{"backstop_tasks_claim", "backstop_tasks_lease", "backstop_tasks_running"}
	var bHot, bCold []string
	for _, c := range cols {
		if slices.Contains(narrowCold, c) {
			bCold = append(bCold, c)
		} else {
			bHot = append(bHot, c)
		}
	}
	mentions := func(q string, cs []string) bool {
		for _, c := range cs {
			if strings.Contains(strings.ReplaceAll(q, "payload_size", ""), c) {
				return true
			}
		}
		return false
	}

	var designs []narrowLoopDesign
	designs = append(designs, narrowLoopDesign{name: "a-tasks", hot: "backstop_tasks", key: "id", settleKind: 'u'})
	{ // (b) the vertical split
		d := narrowLoopDesign{name: "b-split", hot: "nb_hot", wide: "nb_cold", key: "id", settleKind: 'u', setup: []string{
			"CREATE TABLE nb_hot AS SELECT " + strings.Join(bHot, ", ") + " FROM backstop_tasks WHERE 0",
			"INSERT INTO nb_hot (rowid, " + strings.Join(bHot, ", ") + ") SELECT rowid, " + strings.Join(bHot, ", ") + " FROM backstop_tasks WHERE queue = $1",
			"CREATE UNIQUE INDEX nb_hot_id ON nb_hot (id)",
			"CREATE TABLE nb_cold AS SELECT " + strings.Join(bCold, ", ") + " FROM backstop_tasks WHERE 0",
			"INSERT INTO nb_cold (rowid, " + strings.Join(bCold, ", ") + ") SELECT rowid, " + strings.Join(bCold, ", ") + " FROM backstop_tasks WHERE queue = $1",
		}}
		for n, q := range idx {
			if !mentions(q, bCold) {
				d.setup = append(d.setup, indexOn(n, "nb_hot"))
			}
		}
		designs = append(designs, d)
	}
	wide := func(table string, keep func(string) bool) []string {
		s := []string{
			"CREATE TABLE " + table + " AS SELECT * FROM backstop_tasks WHERE 0",
			"INSERT INTO " + table + " (rowid, " + strings.Join(cols, ", ") + ") SELECT rowid, " + strings.Join(cols, ", ") + " FROM backstop_tasks WHERE queue = $1",
			"CREATE UNIQUE INDEX " + table + "_id ON " + table + " (id)",
		}
		for n := range idx {
			if keep(n) {
				s = append(s, indexOn(n, table))
			}
		}
		return s
	}
	hot := func(table, from string, textKey bool) []string {
		key := "rid INTEGER PRIMARY KEY, id TEXT NOT NULL"
		if textKey {
			key = "id TEXT PRIMARY KEY"
		}
		s := []string{
			"CREATE TABLE " + table + " (" + key + ", " + narrowHotCols + ")",
			"INSERT INTO " + table + " (rowid, id, " + narrowHotCols + ") SELECT rowid, id, " + narrowHotCols + " FROM " + from,
		}
		for _, n := range hotIdx {
			q := indexOn(n, table)
			if !textKey {
				q = strings.Replace(q, ", id)", ")", 1) // the claim index: the row id orders it
			}
			s = append(s, q)
		}
		return s
	}
	notHot := func(n string) bool { return !slices.Contains(hotIdx, n) }
	stateFree := func(n string) bool { return !strings.Contains(idx[n], "state") }
	for _, text := range []bool{true, false} {
		name, h, w, key := "c-narrow", "nc_hot", "nc_wide", "id"
		if !text {
			name, h, w, key = "e-narrow-rowid", "ne_hot", "ne_wide", "rowid"
		}
		designs = append(designs, narrowLoopDesign{name: name, hot: h, wide: w, key: key, settleKind: 'c',
			setup: append(wide(w, notHot), hot(h, w, text)...)})
	}
	for _, text := range []bool{true, false} {
		name, h, w, o, key := "d-insert-only", "nd_hot", "nd_wide", "nd_out", "id"
		if !text {
			name, h, w, o, key = "d-insert-only-rowid", "nf_hot", "nf_wide", "nf_out", "rowid"
		}
		setup := append(wide(w, stateFree), hot(h, w, text)...)
		setup = append(setup, "CREATE TABLE "+o+` (key INTEGER PRIMARY KEY, state TEXT NOT NULL, attempt INTEGER NOT NULL,
	worker_id TEXT, execution_id TEXT, attempted_at INTEGER, finished_at INTEGER NOT NULL, last_error TEXT,
	progress_total INTEGER, progress_completed INTEGER, event_seqs TEXT)`,
			"CREATE INDEX "+o+"_finished ON "+o+" (state, finished_at) WHERE state IN ('succeeded', 'canceled')")
		designs = append(designs, narrowLoopDesign{name: name, hot: h, wide: w, out: o, key: key, settleKind: 'd', setup: setup})
	}
	for _, d := range designs {
		for _, q := range d.setup {
			if strings.Contains(q, "$1") {
				exec(strings.ReplaceAll(q, "$1", "?"), queue)
			} else {
				exec(q)
			}
		}
	}
	// The floor's own table (internal/bench's).
	exec(`CREATE TABLE floor_tasks (id INTEGER PRIMARY KEY, queue TEXT NOT NULL, kind TEXT NOT NULL, state TEXT NOT NULL DEFAULT 'pending',
	priority INTEGER NOT NULL DEFAULT 0, run_at INTEGER NOT NULL, attempt INTEGER NOT NULL DEFAULT 0, payload TEXT,
	lease_expires_at INTEGER, finalized_at INTEGER)`)
	exec(`CREATE INDEX floor_tasks_pending ON floor_tasks (queue, priority DESC, run_at, id) WHERE state = 'pending'`)
	exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000)
	INSERT INTO floor_tasks (queue, kind, run_at, payload) SELECT ?, 'noop', ?, '{}' FROM n`, queue, us(now))
	designs = append(designs, narrowLoopDesign{name: "floor", hot: "floor_tasks", key: "id", settleKind: 'u'})
	// No ANALYZE: the store never runs it, and statistics taken while no
	// task runs make the settle scan the running tasks once per input row.
	for _, d := range designs {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name IN (?, ?, ?)", d.hot, d.wide, d.out).Scan(&n); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("design=%s indexes=%d\n", d.name, n)
	}

	var pageSize int64
	if err := db.QueryRowContext(ctx, "PRAGMA page_size").Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	exec("PRAGMA wal_autocheckpoint = 0")
	defer exec("PRAGMA wal_autocheckpoint = 4000")
	frames := func() int64 {
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		return max(0, (fi.Size()-32)/(pageSize+24))
	}

	const n = 1000
	// floorPair is the floor's claim and complete on design d's hot table.
	floorPair := func(d narrowLoopDesign) {
		at := us(time.Now())
		var ids []int64
		if err := nlTx(ctx, db, func(tx *sql.Tx) error {
			rows, err := tx.QueryContext(ctx, `UPDATE `+d.hot+` SET state = 'running', attempt = attempt + 1, lease_expires_at = ?1
WHERE rowid IN (SELECT rowid FROM `+d.hot+` WHERE state = 'pending' AND queue = ?4 AND run_at <= ?2
	ORDER BY priority DESC, run_at, `+d.key+` LIMIT ?3)
RETURNING rowid`, at+60_000_000, at, n, queue)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					return err
				}
				ids = append(ids, id)
			}
			return rows.Err()
		}); err != nil {
			t.Fatalf("%s: floor claim: %v", d.name, err)
		}
		if len(ids) != n {
			t.Fatalf("%s: floor claimed %d", d.name, len(ids))
		}
		slices.Sort(ids)
		list, fin := nlList(ids), us(time.Now())
		if err := nlTx(ctx, db, func(tx *sql.Tx) error {
			var qs []string
			switch d.settleKind {
			case 'u':
				qs = []string{`UPDATE ` + d.hot + ` SET state = 'succeeded', finalized_at = ?1, lease_expires_at = NULL
WHERE rowid IN (SELECT value FROM json_each(?2)) AND state = 'running'`}
			case 'c':
				qs = []string{`DELETE FROM ` + d.hot + ` WHERE rowid IN (SELECT value FROM json_each(?2)) AND state = 'running' AND ?1 IS NOT NULL`,
					`UPDATE ` + d.wide + ` SET state = 'succeeded', finalized_at = ?1, attempt = attempt + 1 WHERE rowid IN (SELECT value FROM json_each(?2))`}
			case 'd':
				qs = []string{`DELETE FROM ` + d.hot + ` WHERE rowid IN (SELECT value FROM json_each(?2)) AND state = 'running' AND ?1 IS NOT NULL`,
					`INSERT INTO ` + d.out + ` (key, state, attempt, finished_at) SELECT value, 'succeeded', 1, ?1 FROM json_each(?2)`}
			}
			for _, q := range qs {
				if _, err := tx.ExecContext(ctx, q, fin, list); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatalf("%s: floor complete: %v", d.name, err)
		}
	}
	p := func() store.ClaimParams {
		return store.ClaimParams{Queue: queue, WorkerID: "narrow", Max: n, Now: time.Now(), Lease: time.Minute}
	}
	// fullPair is Backstop's claim and success settle on design d; without
	// pieces, without their event rows and counts.
	fullPair := func(d narrowLoopDesign, pieces bool) {
		cp := p()
		var tasks []*bt.Task
		if d.name == "a-tasks" {
			if tasks, err = s.claimTx(ctx, cp, false); err != nil {
				t.Fatal(err)
			}
		} else if err := nlTx(ctx, db, func(tx *sql.Tx) error {
			var err error
			tasks, err = s.narrowClaim(ctx, tx, d, cp, pieces)
			return err
		}); err != nil {
			t.Fatalf("%s: claim: %v", d.name, err)
		}
		if len(tasks) != n {
			t.Fatalf("%s: claimed %d", d.name, len(tasks))
		}
		ss := make([]store.Settlement, len(tasks))
		for i, tk := range tasks {
			ss[i] = store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomeSucceeded,
				State: bt.StateSucceeded, FinishedAt: time.Now()}
		}
		var applied []bool
		if d.name == "a-tasks" {
			applied, err = s.Settle(ctx, ss)
		} else {
			err = nlTx(ctx, db, func(tx *sql.Tx) error {
				var err error
				applied, err = s.narrowSettle(ctx, tx, d, ss, pieces)
				return err
			})
		}
		if err != nil {
			t.Fatalf("%s: settle: %v", d.name, err)
		}
		if k := slices.Index(applied, false); k >= 0 || len(applied) != n {
			t.Fatalf("%s: settlement %d of %d not applied", d.name, k, len(applied))
		}
	}
	type step struct {
		d     narrowLoopDesign
		level int // 0 the floor's; 1 Backstop's without the events and counts (not on a: the store's own functions); 2 Backstop's
	}
	var steps []step
	for _, d := range designs {
		steps = append(steps, step{d, 0})
		if d.name != "a-tasks" && d.name != "floor" {
			steps = append(steps, step{d, 1})
		}
		if d.name != "floor" {
			steps = append(steps, step{d, 2})
		}
	}
	for r := range rounds {
		for k := range steps {
			st := steps[(k+r)%len(steps)]
			exec("PRAGMA wal_checkpoint(TRUNCATE)")
			c0 := nlCPU()
			name := st.d.name + []string{"-floor", "-returning", "-full"}[st.level]
			if st.level > 0 {
				fullPair(st.d, st.level == 2)
			} else {
				floorPair(st.d)
			}
			cpu := nlCPU() - c0
			fmt.Printf("round=%d db=%s n=%d cpu_us_per_task=%.2f wal_frames=%d\n", r, name, n, float64(cpu.Microseconds())/n, frames())
		}
	}
}

// narrowClaim is the claim of claimIn on design d: its pick and SET list
// on the hot table, then what the worker reads (claimCols) joined from
// the wide (or cold) row, the task.claimed row and the counts.
func (s *Store) narrowClaim(ctx context.Context, tx *sql.Tx, d narrowLoopDesign, p store.ClaimParams, pieces bool) ([]*bt.Task, error) {
	now, lease := us(p.Now), us(p.Now.Add(p.Lease))
	prefix, off, err := executionIDPrefix()
	if err != nil {
		return nil, err
	}
	set := ""
	if d.name == "b-split" {
		set = ", updated_at = ?4, cancel_requested_at = NULL"
	}
	rows, err := tx.QueryContext(ctx, `UPDATE `+d.hot+` SET state = 'running', attempt = attempt + 1,
		worker_id = ?1, execution_id = ?2 || printf('%012x', (rowid + ?3) & 281474976710655), attempted_at = ?4, lease_expires_at = ?5,
		event_seqs = coalesce(event_seqs, '') || ',' || `+nextEventSeq+set+`
		WHERE rowid IN (SELECT rowid FROM `+d.hot+` WHERE state = 'pending' AND queue = ?6 AND run_at <= ?4
			AND (deadline IS NULL OR deadline > ?4)
			AND NOT EXISTS (SELECT 1 FROM backstop_queues WHERE name = ?6)
			ORDER BY priority DESC, run_at, `+d.key+` LIMIT ?7)
		RETURNING rowid, `+nextEventSeq, p.WorkerID, prefix, off, now, lease, p.Queue, p.Max)
	if err != nil {
		return nil, err
	}
	var ids []int64
	var seq int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id, &seq); err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// claimCols, each column from the side that holds it.
	h := func(c string) string { return "h." + c }
	w := func(c string) string { return "w." + c }
	pick := w
	if d.name == "b-split" {
		pick = func(c string) string {
			if slices.Contains(narrowCold, c) {
				return "w." + c
			}
			return "h." + c
		}
	}
	extra := claimExtra
	for _, c := range []string{"payload_spilled", "timeout_us", "deadline", "retry_policy", "progress_total", "progress_completed",
		"complexity", "trace_parent", "last_error", "idempotency_key", "merge_key", "merge_count", "dead_count", "replay_count", "replayed_from"} {
		col := pick(c)
		if c == "deadline" {
			col = h(c)
		}
		extra = strings.ReplaceAll(extra, c+" ", col+" ")
		extra = strings.ReplaceAll(extra, c+",", col+",")
		extra = strings.ReplaceAll(extra, c+")", col+")")
	}
	q := `SELECT h.id, h.kind, h.priority, h.attempt, ` + pick("max_attempts") + `, w.payload, ` + pick("payload_size") + `, w.attributes,
	h.run_at, w.created_at, h.execution_id, ` + extra + `, ?2
FROM ` + d.hot + ` h JOIN ` + d.wide + ` w ON w.rowid = h.rowid WHERE h.rowid IN (SELECT value FROM json_each(?1))`
	rows, err = tx.QueryContext(ctx, q, nlList(ids), seq)
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, q)
	}
	tasks, attrs, seq, err := scanClaimed(rows, p)
	if err != nil || !pieces {
		return tasks, err
	}
	if err := claimedEvents(ctx, tx, tasks, attrs, now, lease, seq); err != nil {
		return nil, err
	}
	if len(tasks) > 0 {
		if err := s.moveCounts(ctx, tx, bt.StatePending, bt.StateRunning, map[string]int{p.Queue: len(tasks)}); err != nil {
			return nil, err
		}
	}
	return tasks, nil
}

// narrowSettle is settleSucceeded on design d (all of ss fit one
// statement; no progress): the hot row settled by its row id under the
// lease condition, the finished facts written as d's settleKind says,
// then the counts and the task.started and task.succeeded rows.
func (s *Store) narrowSettle(ctx context.Context, tx *sql.Tx, d narrowLoopDesign, ss []store.Settlement, pieces bool) ([]bool, error) {
	applied := make([]bool, len(ss))
	index := make(map[string]int, len(ss))
	for i, st := range ss {
		index[st.ExecutionID] = i
	}
	var settled []settledRow
	switch d.settleKind {
	case 'u': // the vertical split: settleSucceededSQL on the hot part, the attributes from the cold
		q := strings.ReplaceAll(settleSucceededSQL(len(ss), true), "backstop_tasks", d.hot)
		q = strings.Replace(q, "kind, attributes,", "kind, (SELECT c.attributes FROM "+d.wide+" c WHERE c.rowid = "+d.hot+".rowid),", 1)
		args := make([]any, 0, 6*len(ss))
		for _, st := range ss {
			args = append(args, st.TaskID, st.ExecutionID, us(st.FinishedAt), nil, nil, executionRowid(st.ExecutionID))
		}
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		if settled, err = scanSettled(rows, true); err != nil {
			return nil, err
		}
		byRow := make(map[int64]int, len(ss))
		for i, st := range ss {
			byRow[executionRowid(st.ExecutionID)] = i
		}
		if err := nameSettled(settled, ss, byRow, nil); err != nil {
			return nil, err
		}
	case 'c', 'd':
		var b strings.Builder
		args := make([]any, 0, 4*len(ss))
		for i, st := range ss {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString("(?,?,?,?)")
			args = append(args, executionRowid(st.ExecutionID), st.TaskID, st.ExecutionID, us(st.FinishedAt))
		}
		rows, err := tx.QueryContext(ctx, `DELETE FROM `+d.hot+` WHERE rowid IN (SELECT v.column1 FROM (VALUES `+b.String()+`) v
	JOIN `+d.hot+` h ON h.rowid = v.column1 AND h.id = v.column2 AND h.execution_id = v.column3 AND h.state = 'running')
RETURNING rowid, id, attempt, coalesce(worker_id, ''), execution_id, attempted_at, queue, kind, event_seqs`, args...)
		if err != nil {
			return nil, err
		}
		type gone struct {
			rowid    int64
			r        settledRow
			seqs     sql.NullString
			attempts sql.NullInt64
		}
		var gs []gone
		for rows.Next() {
			var g gone
			if err := rows.Scan(&g.rowid, &g.r.taskID, intCol{&g.r.attempt}, &g.r.worker, &g.r.execID, &g.attempts,
				&g.r.queue, &g.r.kind, &g.seqs); err != nil {
				rows.Close()
				return nil, err
			}
			g.r.finished = us(ss[index[g.r.execID]].FinishedAt)
			g.r.started = g.r.finished
			if g.attempts.Valid {
				g.r.started = g.attempts.Int64
			}
			gs = append(gs, g)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		var seq int64
		if err := tx.QueryRowContext(ctx, "SELECT "+nextEventSeq).Scan(&seq); err != nil {
			return nil, err
		}
		b.Reset()
		args = args[:0]
		for i, g := range gs {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString("(?,?,?,?,?,?,?)")
			args = append(args, g.rowid, g.r.attempt, g.r.worker, g.r.execID, g.r.started, g.r.finished,
				g.seqs.String+","+strconv.FormatInt(seq, 10)+","+strconv.FormatInt(seq+1, 10))
		}
		attrs := map[int64]sql.NullString{}
		if d.settleKind == 'c' {
			rows, err := tx.QueryContext(ctx, `UPDATE `+d.wide+` SET state = 'succeeded', attempt = v.column2, worker_id = v.column3,
	execution_id = v.column4, attempted_at = v.column5, finalized_at = v.column6, updated_at = v.column6, lease_expires_at = NULL,
	event_seqs = v.column7
FROM (VALUES `+b.String()+`) AS v WHERE `+d.wide+`.rowid = v.column1
RETURNING rowid, attributes`, args...)
			if err != nil {
				return nil, err
			}
			for rows.Next() {
				var id int64
				var a sql.NullString
				if err := rows.Scan(&id, &a); err != nil {
					rows.Close()
					return nil, err
				}
				attrs[id] = a
			}
			rows.Close()
		} else {
			if _, err := tx.ExecContext(ctx, `INSERT INTO `+d.out+` (key, state, attempt, worker_id, execution_id, attempted_at, finished_at, event_seqs)
SELECT column1, 'succeeded', column2, column3, column4, column5, column6, column7 FROM (VALUES `+b.String()+`)`, args...); err != nil {
				return nil, err
			}
			ids := make([]int64, len(gs))
			for i, g := range gs {
				ids[i] = g.rowid
			}
			rows, err := tx.QueryContext(ctx, `SELECT rowid, attributes FROM `+d.wide+` WHERE rowid IN (SELECT value FROM json_each(?))`, nlList(ids))
			if err != nil {
				return nil, err
			}
			for rows.Next() {
				var id int64
				var a sql.NullString
				if err := rows.Scan(&id, &a); err != nil {
					rows.Close()
					return nil, err
				}
				attrs[id] = a
			}
			rows.Close()
		}
		for _, g := range gs {
			g.r.attrs, g.r.evSeq = attrs[g.rowid], seq
			settled = append(settled, g.r)
		}
	}
	if len(settled) == 0 {
		return applied, nil
	}
	moved := map[string]int{}
	for _, r := range settled {
		applied[index[r.execID]] = true
		moved[r.queue]++
	}
	if !pieces {
		return applied, nil
	}
	if err := s.moveCounts(ctx, tx, bt.StateRunning, bt.StateSucceeded, moved); err != nil {
		return nil, err
	}
	return applied, succeededEvents(ctx, tx, settled, settled[0].evSeq, store.ActorFrom(ctx, ""))
}
