package pgstore

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A planning measurement, not a product path: what the floor's two
// statements and Backstop's claim and success settle would cost the
// server on other designs of the task table (docs/benchmarks.md, "A
// narrow hot table"). Every design is built as scratch tables beside
// backstop_tasks, filled from its rows.

// narrowCold is what the vertical split (design b) moves to a side
// table: the columns no claim, settle, heartbeat, retry or death writes
// and no claim reads to choose a task.
var narrowCold = []string{
	"payload", "payload_spilled", "attributes", "retry_policy", "idempotency_key", "merge_key", "merge_count",
	"trace_parent", "created_at", "complexity", "unique_until", "debounce_for_us", "debounce_until",
	"replayed_from", "replay_count",
}

// narrowHot is the narrow hot table's columns (designs c, d, e) with
// their types: what the claim picks by and what the claim and the
// settle write while the task is claimable or running.
var narrowHot = [][2]string{
	{"queue", "text NOT NULL"}, {"kind", "text NOT NULL"}, {"state", "text NOT NULL"},
	{"priority", "int NOT NULL"}, {"run_at", "timestamptz NOT NULL"}, {"deadline", "timestamptz"},
	{"attempt", "int NOT NULL"}, {"worker_id", "text"}, {"execution_id", "text"},
	{"attempted_at", "timestamptz"}, {"lease_expires_at", "timestamptz"}, {"event_links", "bigint[]"},
}

// narrowDesign is one design: its tables' DDL (run after the pending
// rows of queue $1 are in backstop_tasks), its floor claim and settle,
// and Backstop's claim and settle up to their answer (variant adds the
// event rows, the counts and the answer; on design a they are the
// store's statements whole). Claims take $1 queue, $2 now, $3 how many, $4 worker, $5
// lease expiry; settles $1 keys, $2 execution ids, $3 finish times,
// $4-$6 progress, $7 actor (each the first parameters it names).
// running lists the running tasks' keys and execution ids.
type narrowDesign struct {
	name           string
	setup          []string
	floorClaim     string
	floorSettle    string
	claim, settle  string
	running        string
	bigint         bool
	noTriggers     bool
	get, listDone  string // readers: $1 keys (Get), $1 queue (finished, newest first)
	listPending    string // $1 queue, claim order
	keyOf          string // the key column of the design's Get input
	scratchTables  []string
	scratchIndexes int
	stepsA         []hotStep // design a: TestHotPathLadder's "returning" and "events" steps
	enqueue        string    // insert 1,000 tasks copied from pending ones of queue $1 into queue $2
}

// variant is d's claim and settle with Backstop's pieces up to level:
// 1 the pick, SET list and what the worker and the events read; 2 and
// the event rows; 3 and the counts (the store's statements on design a).
func (d narrowDesign) variant(level int) (claim, settle string) {
	if d.stepsA != nil {
		if level == 3 {
			return d.claim, d.settle
		}
		return d.stepsA[level-1].claim, d.stepsA[level-1].settle
	}
	claim, settle = d.claim, d.settle
	if level >= 2 {
		claim += ", " + claimEvents
		settle += ", " + succeededEvents
	}
	if level >= 3 {
		claim += ", " + countedMove("claimed", "pending", "running")
		settle += ", " + countedMove("settled", "running", "succeeded")
	}
	return claim + "\nSELECT * FROM claimed", settle + "\nSELECT idx FROM settled"
}

// narrowDesigns builds the designs from backstop_tasks' own columns and
// index definitions (cols, idx: name -> CREATE INDEX).
func narrowDesigns(cols []string, idx map[string]string) []narrowDesign {
	isCold := func(c string) bool { return slices.Contains(narrowCold, c) }
	hotNames := []string{"id"}
	for _, h := range narrowHot {
		hotNames = append(hotNames, h[0])
	}
	isHot := func(c string) bool { return slices.Contains(hotNames, c) }
	// indexOn is backstop_tasks' index name re-created on table as name.
	indexOn := func(name, table string) string {
		d := idx[name]
		d = strings.Replace(d, " "+name+" ", " "+table+"_"+strings.TrimPrefix(name, "backstop_tasks_")+" ", 1)
		return strings.Replace(d, " ON public.backstop_tasks ", " ON "+table+" ", 1)
	}
	// cold part of the vertical split, and the columns it keeps hot.
	var bHot, bCold []string
	for _, c := range cols {
		if isCold(c) {
			bCold = append(bCold, c)
		} else {
			bHot = append(bHot, c)
		}
	}
	// allCols selects every column of backstop_tasks from alias h when
	// hot reports it so, otherwise from w (taskCols' list and payload).
	allCols := func(hot func(string) bool) string {
		var b strings.Builder
		for _, c := range append(slices.Clone(taskColumns), "payload") {
			if hot(c) {
				b.WriteString("h." + c + ", ")
			} else {
				b.WriteString("w." + c + ", ")
			}
		}
		b.WriteString("w.event_links AS wide_links")
		return b.String()
	}
	hotDDL := func(table string, bigint bool) string {
		var b strings.Builder
		key := "id text PRIMARY KEY"
		if bigint {
			key = "sid bigint PRIMARY KEY, id text NOT NULL"
		}
		b.WriteString("CREATE TABLE " + table + " (" + key)
		for _, h := range narrowHot {
			b.WriteString(", " + h[0] + " " + h[1])
		}
		b.WriteString(")")
		return b.String()
	}
	hotCols := strings.Join(hotNames[1:], ", ")
	// src is 1,000 pending tasks of queue $1 as new tasks of queue $2.
	var srcList []string
	for _, c := range cols {
		switch c {
		case "id":
			srcList = append(srcList, "gen_random_uuid()::text AS id")
		case "queue":
			srcList = append(srcList, "$2::text AS queue")
		default:
			srcList = append(srcList, c)
		}
	}
	all := strings.Join(cols, ", ")
	src := "WITH src AS (SELECT " + strings.Join(srcList, ", ") + " FROM backstop_tasks WHERE queue = $1 AND state = 'pending' LIMIT 1000)"
	enqueueBoth := func(hot, wide string, bigint bool) string {
		if bigint {
			return src + ", w AS (INSERT INTO " + wide + " (" + all + ") SELECT " + all + " FROM src RETURNING sid, id)\nINSERT INTO " +
				hot + " (sid, id, " + hotCols + ") SELECT w.sid, id, " + hotCols + " FROM src JOIN w USING (id)"
		}
		return src + ", w AS (INSERT INTO " + wide + " (" + all + ") SELECT " + all + " FROM src)\nINSERT INTO " +
			hot + " (id, " + hotCols + ") SELECT id, " + hotCols + " FROM src"
	}
	hotFill := func(table, wide string, bigint bool) string {
		if bigint {
			return "INSERT INTO " + table + " (sid, id, " + hotCols + ") SELECT sid, id, " + hotCols + " FROM " + wide + " WHERE queue = $1"
		}
		return "INSERT INTO " + table + " (id, " + hotCols + ") SELECT id, " + hotCols + " FROM " + wide + " WHERE queue = $1"
	}
	hotIndexes := func(table, key string) []string {
		return []string{
			"CREATE INDEX " + table + "_claim ON " + table + " (queue, priority DESC, run_at, " + key + ") WHERE state = 'pending'",
			"CREATE INDEX " + table + "_running ON " + table + " (queue, kind, lease_expires_at) WHERE state = 'running'",
		}
	}
	wideCopy := func(table string, bigint bool) []string {
		s := []string{"CREATE TABLE " + table + " (LIKE backstop_tasks INCLUDING DEFAULTS)"}
		if bigint {
			s = append(s, "ALTER TABLE "+table+" ADD COLUMN sid bigint GENERATED BY DEFAULT AS IDENTITY")
		}
		s = append(s, "INSERT INTO "+table+" SELECT * FROM backstop_tasks WHERE queue = $1")
		if bigint {
			s = append(s, "CREATE UNIQUE INDEX "+table+"_sid ON "+table+" (sid)")
		}
		return s
	}
	var allIdx []string // every index but the two hot ones
	for n := range idx {
		if n != "backstop_tasks_claim" && n != "backstop_tasks_running" {
			allIdx = append(allIdx, n)
		}
	}
	sort.Strings(allIdx)
	// stateFree: backstop_tasks' indexes whose columns and predicate do
	// not name state: an insert-only wide row can keep only these.
	var stateFree []string
	for _, n := range allIdx {
		if !strings.Contains(idx[n], "state") {
			stateFree = append(stateFree, n)
		}
	}

	// The claim's pick on a hot table t (Backstop's: by ctid, the
	// deadline, the paused queues), and the floor's.
	pick := func(t, key string) string {
		return `WITH picked AS (SELECT ctid AS tid FROM ` + t + `
	WHERE state = 'pending' AND queue = $1 AND run_at <= $2
	  AND (deadline IS NULL OR deadline > $2)
	  AND NOT EXISTS (SELECT 1 FROM backstop_queues pq WHERE pq.name = $1)
	ORDER BY priority DESC, run_at, ` + key + `
	LIMIT $3
	FOR UPDATE SKIP LOCKED
), ` + claimSeq
	}
	floorPick := func(t, key string) string {
		return `WITH picked AS (SELECT ` + key + ` FROM ` + t + ` WHERE state = 'pending' AND queue = $1 AND run_at <= $2
	ORDER BY priority DESC, run_at, ` + key + ` LIMIT $3 FOR UPDATE SKIP LOCKED)
UPDATE ` + t + ` t SET state = 'running', attempt = t.attempt + 1, lease_expires_at = $2::timestamptz + interval '1 minute'
WHERE t.` + key + ` = ANY(ARRAY(SELECT ` + key + ` FROM picked)) RETURNING t.` + key
	}
	// hotSet is the claim's SET list on a hot table (Backstop's).
	hotSet := func(t string) string {
		return `UPDATE ` + t + ` c SET
		state = 'running',
		attempt = c.attempt + 1,
		worker_id = $4,
		execution_id = ` + execIDs + `,
		attempted_at = $2,
		lease_expires_at = $5,
		event_links = c.event_links || s.seq
	FROM claim_seq s WHERE c.ctid = ANY(ARRAY(SELECT tid FROM picked))`
	}
	input := func(keyType string) string {
		return `WITH input AS (
	SELECT * FROM unnest($1::` + keyType + `[], $2::text[], $3::timestamptz[], $4::bool[], $5::int[], $6::int[])
		WITH ORDINALITY AS i(task_id, execution_id, finished_at, has_progress, total, completed, idx)
), ` + settleLink
	}
	events := ""

	// (c), (d) and (e): the narrow hot table's claim, joined to the wide
	// row for what the worker reads.
	narrowClaim := func(hot, wide, key string) string {
		return pick(hot, key) + `, claimed_hot AS (
	` + hotSet(hot) + `
	RETURNING c.*, s.seq AS ev_seq
), claimed AS (SELECT ` + allCols(isHot) + `, h.ev_seq FROM claimed_hot h JOIN ` + wide + ` w ON w.` + key + ` = h.` + key + `)`
	}
	// The success settle of a narrow hot row: deleted, its finished facts
	// written by out (a CTE named settled over deleted d, input i, the
	// link q, the wide row w).
	narrowDelete := func(hot, key string) string {
		return `, deleted AS (
	DELETE FROM ` + hot + ` t USING input i, settle_link q
	WHERE t.` + key + ` = i.task_id AND ` + leaseHeld + `
	RETURNING i.idx, t.` + key + ` AS key, i.execution_id, t.attempt, t.worker_id, t.attempted_at, i.finished_at,
		i.has_progress, i.total, i.completed, t.event_links, q.link AS ev_link
)`
	}
	cSettle := func(hot, wide, key, keyType string) string {
		return input(keyType) + narrowDelete(hot, key) + `, settled AS (
	UPDATE ` + wide + ` w SET
		state = 'succeeded',
		attempt = d.attempt,
		worker_id = d.worker_id,
		execution_id = d.execution_id,
		attempted_at = d.attempted_at,
		event_links = d.event_links || d.ev_link,
		updated_at = d.finished_at,
		finalized_at = d.finished_at,
		progress_total = CASE WHEN d.has_progress THEN d.total ELSE w.progress_total END,
		progress_completed = CASE WHEN d.has_progress THEN d.completed ELSE w.progress_completed END
	FROM deleted d WHERE w.` + key + ` = d.key
	RETURNING d.idx, w.id, d.execution_id, d.attempt, d.worker_id, d.attempted_at, d.finished_at,
		w.queue, w.kind, w.attributes, w.dlq_status, d.ev_link
)` + events
	}
	outcomeDDL := func(table, keyType string) []string {
		return []string{
			"CREATE TABLE " + table + " (key " + keyType + ` PRIMARY KEY, state text NOT NULL, attempt int NOT NULL,
	worker_id text, execution_id text, attempted_at timestamptz, finished_at timestamptz NOT NULL, last_error text,
	progress_total int, progress_completed int, event_links bigint[])`,
			"CREATE INDEX " + table + "_finished ON " + table + " (finished_at) WHERE state = ANY (ARRAY['succeeded', 'canceled'])",
		}
	}
	dSettle := func(hot, wide, out, key, keyType string) string {
		return input(keyType) + narrowDelete(hot, key) + `, outcome AS (
	INSERT INTO ` + out + ` (key, state, attempt, worker_id, execution_id, attempted_at, finished_at, progress_total, progress_completed, event_links)
	SELECT key, 'succeeded', attempt, worker_id, execution_id, attempted_at, finished_at,
		CASE WHEN has_progress THEN total END, CASE WHEN has_progress THEN completed END, event_links || ev_link FROM deleted
), settled AS (
	SELECT d.idx, w.id, d.execution_id, d.attempt, d.worker_id, d.attempted_at, d.finished_at,
		w.queue, w.kind, w.attributes, w.dlq_status, d.ev_link
	FROM deleted d JOIN ` + wide + ` w ON w.` + key + ` = d.key
)` + events
	}
	cFloorSettle := func(hot, wide, key, keyType string) string {
		return `WITH d AS (DELETE FROM ` + hot + ` WHERE ` + key + ` = ANY($1::` + keyType + `[]) AND state = 'running' RETURNING ` + key + `, attempt)
UPDATE ` + wide + ` w SET state = 'succeeded', finalized_at = now(), attempt = d.attempt FROM d WHERE w.` + key + ` = d.` + key
	}
	dFloorSettle := func(hot, out, key, keyType string) string {
		return `WITH d AS (DELETE FROM ` + hot + ` WHERE ` + key + ` = ANY($1::` + keyType + `[]) AND state = 'running' RETURNING ` + key + `, attempt)
INSERT INTO ` + out + ` (key, state, attempt, finished_at) SELECT ` + key + `, 'succeeded', attempt, now() FROM d`
	}
	// Readers: a Get of many tasks by key, the newest finished tasks of a
	// queue, the first pending ones in claim order.
	cGet := func(hot, wide, key, keyType string) string {
		return `SELECT ` + allCols(func(string) bool { return false }) + `, coalesce(h.state, w.state), coalesce(h.attempt, w.attempt),
	coalesce(h.execution_id, w.execution_id), coalesce(h.lease_expires_at, w.lease_expires_at)
FROM ` + wide + ` w LEFT JOIN ` + hot + ` h ON h.` + key + ` = w.` + key + ` AND h.` + key + ` = ANY($1::` + keyType + `[])
WHERE w.` + key + ` = ANY($1::` + keyType + `[])`
	}
	dGet := func(hot, wide, out, key, keyType string) string {
		return `SELECT ` + allCols(func(string) bool { return false }) + `, coalesce(o.state, h.state, w.state), coalesce(o.attempt, h.attempt, w.attempt),
	coalesce(o.execution_id, h.execution_id), h.lease_expires_at, o.finished_at
FROM ` + wide + ` w LEFT JOIN ` + hot + ` h ON h.` + key + ` = w.` + key + ` AND h.` + key + ` = ANY($1::` + keyType + `[])
	LEFT JOIN ` + out + ` o ON o.key = w.` + key + ` AND o.key = ANY($1::` + keyType + `[])
WHERE w.` + key + ` = ANY($1::` + keyType + `[])`
	}
	pendingList := func(hot, wide, key string) string {
		return `SELECT ` + allCols(isHot) + ` FROM ` + hot + ` h JOIN ` + wide + ` w ON w.` + key + ` = h.` + key + `
WHERE h.state = 'pending' AND h.queue = $1 ORDER BY h.priority DESC, h.run_at, h.` + key + ` LIMIT 100`
	}

	var ds []narrowDesign

	// (a) today's table, the store's own statements.
	ds = append(ds, narrowDesign{
		name:        "a-tasks",
		floorClaim:  floorPick("backstop_tasks", "id"),
		floorSettle: "UPDATE backstop_tasks SET state = 'succeeded', finalized_at = now(), lease_expires_at = NULL WHERE id = ANY($1::text[]) AND state = 'running'",
		claim:       sqlClaim, settle: sqlSettleSucceeded, stepsA: hotLadder()[4:6],
		running:     "SELECT id, coalesce(execution_id, '') FROM backstop_tasks WHERE queue = $1 AND state = 'running'",
		get:         "SELECT " + taskCols("t") + " FROM backstop_tasks t WHERE t.id = ANY($1::text[])",
		listDone:    "SELECT " + taskCols("t") + " FROM backstop_tasks t WHERE t.queue = $1 AND t.state = 'succeeded' ORDER BY t.finalized_at DESC LIMIT 100",
		listPending: "SELECT " + taskCols("t") + " FROM backstop_tasks t WHERE t.queue = $1 AND t.state = 'pending' ORDER BY t.priority DESC, t.run_at, t.id LIMIT 100",
		keyOf:       "id",
		enqueue:     src + "\nINSERT INTO backstop_tasks (" + all + ") SELECT " + all + " FROM src",
	})

	// (b) the vertical split: the hot part keeps the state-filtered
	// indexes whose columns it holds; the cold part is keyed by id.
	{
		setup := []string{
			"CREATE TABLE nb_hot AS SELECT " + strings.Join(bHot, ", ") + " FROM backstop_tasks WHERE queue = $1",
			"ALTER TABLE nb_hot ADD PRIMARY KEY (id)",
			"CREATE TABLE nb_cold AS SELECT id, " + strings.Join(bCold, ", ") + " FROM backstop_tasks WHERE queue = $1",
			"ALTER TABLE nb_cold ADD PRIMARY KEY (id)",
		}
		n := 2
		for _, name := range append([]string{"backstop_tasks_claim", "backstop_tasks_running"}, allIdx...) {
			if name == "backstop_tasks_pkey" {
				continue
			}
			d := idx[name]
			cold := false
			for _, c := range bCold {
				if regexp.MustCompile(`\b` + c + `\b`).MatchString(d) {
					cold = true
				}
			}
			if !cold {
				setup = append(setup, indexOn(name, "nb_hot"))
				n++
			}
		}
		isBHot := func(c string) bool { return !isCold(c) }
		ds = append(ds, narrowDesign{
			name:        "b-split",
			setup:       setup,
			floorClaim:  floorPick("nb_hot", "id"),
			floorSettle: "UPDATE nb_hot SET state = 'succeeded', finalized_at = now(), lease_expires_at = NULL WHERE id = ANY($1::text[]) AND state = 'running'",
			claim: pick("nb_hot", "id") + `, claimed_hot AS (
	` + strings.Replace(hotSet("nb_hot"), "event_links =", "updated_at = $2,\n\t\tevent_links =", 1) + `
	RETURNING c.*, s.seq AS ev_seq
), claimed AS (SELECT ` + strings.Replace(allCols(isBHot), ", w.event_links AS wide_links", "", 1) + `, h.ev_seq FROM claimed_hot h JOIN nb_cold w ON w.id = h.id)`,
			settle: input("text") + `, settled AS (
	UPDATE nb_hot t SET
		state = 'succeeded',
		event_links = t.event_links || q.link,
		updated_at = i.finished_at,
		finalized_at = i.finished_at,
		lease_expires_at = NULL,
		progress_total = CASE WHEN i.has_progress THEN i.total ELSE t.progress_total END,
		progress_completed = CASE WHEN i.has_progress THEN i.completed ELSE t.progress_completed END
	FROM input i, settle_link q
	WHERE t.id = i.task_id AND ` + leaseHeld + `
	RETURNING i.idx, t.id, i.execution_id, t.attempt, t.worker_id, t.attempted_at, i.finished_at,
		t.queue, t.kind, (SELECT w.attributes FROM nb_cold w WHERE w.id = t.id) AS attributes, t.dlq_status, q.link AS ev_link
)` + events,
			running:       "SELECT id, coalesce(execution_id, '') FROM nb_hot WHERE queue = $1 AND state = 'running'",
			noTriggers:    false,
			scratchTables: []string{"nb_hot", "nb_cold"},
			enqueue: src + ", h AS (INSERT INTO nb_hot (" + strings.Join(bHot, ", ") + ") SELECT " + strings.Join(bHot, ", ") +
				" FROM src)\nINSERT INTO nb_cold (id, " + strings.Join(bCold, ", ") + ") SELECT id, " + strings.Join(bCold, ", ") + " FROM src",
			scratchIndexes: n,
		})
	}

	// (c) the narrow hot table, the wide row updated once at the end;
	// (e) the same keyed by a bigint surrogate.
	for _, big := range []bool{false, true} {
		hot, wide, key, keyType, name := "nc_hot", "nc_wide", "id", "text", "c-narrow"
		if big {
			hot, wide, key, keyType, name = "ne_hot", "ne_wide", "sid", "bigint", "e-narrow-bigint"
		}
		setup := append(wideCopy(wide, big), hotDDL(hot, big), hotFill(hot, wide, big))
		if !big {
			setup = append(setup, "ALTER TABLE "+wide+" ADD PRIMARY KEY (id)")
		} else {
			setup = append(setup, "ALTER TABLE "+wide+" ADD PRIMARY KEY (id)")
		}
		for _, n := range allIdx {
			if n != "backstop_tasks_pkey" {
				setup = append(setup, indexOn(n, wide))
			}
		}
		setup = append(setup, hotIndexes(hot, key)...)
		ds = append(ds, narrowDesign{
			name:           name,
			setup:          setup,
			floorClaim:     floorPick(hot, key),
			floorSettle:    cFloorSettle(hot, wide, key, keyType),
			claim:          narrowClaim(hot, wide, key),
			settle:         cSettle(hot, wide, key, keyType),
			running:        "SELECT " + key + "::text, coalesce(execution_id, '') FROM " + hot + " WHERE queue = $1 AND state = 'running'",
			bigint:         big,
			get:            cGet(hot, wide, key, keyType),
			listDone:       "SELECT " + allCols(func(string) bool { return false }) + " FROM " + wide + " w WHERE w.queue = $1 AND w.state = 'succeeded' ORDER BY w.finalized_at DESC LIMIT 100",
			listPending:    pendingList(hot, wide, key),
			keyOf:          key,
			scratchTables:  []string{hot, wide},
			scratchIndexes: len(allIdx) + 1 + 2 + map[bool]int{true: 1}[big],
			enqueue:        enqueueBoth(hot, wide, big),
		})
	}

	// (d) the narrow hot table, the wide row insert-only (only the
	// indexes that do not name state), the finished facts in an outcome
	// table; with a bigint surrogate too.
	for _, big := range []bool{false, true} {
		hot, wide, out, key, keyType, name := "nd_hot", "nd_wide", "nd_out", "id", "text", "d-insert-only"
		if big {
			hot, wide, out, key, keyType, name = "nf_hot", "nf_wide", "nf_out", "sid", "bigint", "d-insert-only-bigint"
		}
		setup := append(wideCopy(wide, big), hotDDL(hot, big), hotFill(hot, wide, big),
			"ALTER TABLE "+wide+" ADD PRIMARY KEY (id)")
		for _, n := range stateFree {
			if n != "backstop_tasks_pkey" {
				setup = append(setup, indexOn(n, wide))
			}
		}
		setup = append(setup, hotIndexes(hot, key)...)
		setup = append(setup, outcomeDDL(out, keyType)...)
		ds = append(ds, narrowDesign{
			name:          name,
			setup:         setup,
			floorClaim:    floorPick(hot, key),
			floorSettle:   dFloorSettle(hot, out, key, keyType),
			claim:         narrowClaim(hot, wide, key),
			settle:        dSettle(hot, wide, out, key, keyType),
			running:       "SELECT " + key + "::text, coalesce(execution_id, '') FROM " + hot + " WHERE queue = $1 AND state = 'running'",
			bigint:        big,
			get:           dGet(hot, wide, out, key, keyType),
			listDone:      "SELECT " + allCols(func(string) bool { return false }) + ", o.state, o.finished_at FROM " + out + " o JOIN " + wide + " w ON w." + key + " = o.key WHERE w.queue = $1 AND o.state = 'succeeded' ORDER BY o.finished_at DESC LIMIT 100",
			listPending:   pendingList(hot, wide, key),
			keyOf:         key,
			scratchTables: []string{hot, wide, out},
			enqueue:       enqueueBoth(hot, wide, big),
			// the wide row's state-free indexes, the hot table's three, the outcome's two
			scratchIndexes: len(stateFree) + 3 + 2 + map[bool]int{true: 1}[big],
		})
	}
	return ds
}

// TestNarrowLadder measures, on the database BACKSTOP_NARROW_LADDER_URL
// (migrated, newest schema; skipped without it; the scratch tables are
// left in it: drop it after), what a claim of 1,000 and its success
// settle cost the server on each design of narrowDesigns, as
// TestHotPathLadder measures the steps of today's table: 170,000 tasks
// enqueued by Store.Enqueue, copied into each design's tables; then
// rounds, each running on every design, in a rotating order, the
// floor's statements and Backstop's at three levels (variant: the pick,
// SET list and what is read; then the event rows; then the counts), and
// the floor's statements on floor_tasks; a line per
// pair with the backend's CPU, buffers and WAL (EXPLAIN's WAL bytes: the
// statement's own, where pg_current_wal_lsn on a shared server counts
// every session's). Then the readers of designs a, c, d: a Get of 1,000
// tasks by key, the newest 100 succeeded of the queue, the first 100
// pending.
func TestNarrowLadder(t *testing.T) {
	u := os.Getenv("BACKSTOP_NARROW_LADDER_URL")
	if u == "" {
		t.Skip("BACKSTOP_NARROW_LADDER_URL is not set")
	}
	ctx := t.Context()
	s, err := Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rounds := 18
	if r := os.Getenv("BACKSTOP_NARROW_ROUNDS"); r != "" {
		fmt.Sscan(r, &rounds)
	}
	queue := "narrow-" + uuid.NewString()[:8]
	batches := 170
	if b := os.Getenv("BACKSTOP_NARROW_BATCHES"); b != "" {
		fmt.Sscan(b, &batches)
	}
	hotTasks(t, s, queue, batches)
	floorTable(t, s)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	var cols []string
	rows, err := conn.Query(ctx, "SELECT attname FROM pg_attribute WHERE attrelid = 'backstop_tasks'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum")
	if err != nil {
		t.Fatal(err)
	}
	if cols, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	idx := map[string]string{}
	rows, err = conn.Query(ctx, "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'backstop_tasks'")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n, d string
		if err := rows.Scan(&n, &d); err != nil {
			t.Fatal(err)
		}
		idx[n] = d
	}
	rows.Close()
	designs := narrowDesigns(cols, idx)
	for _, d := range designs {
		for _, tb := range d.scratchTables {
			exec("DROP TABLE IF EXISTS " + tb)
		}
		for _, q := range d.setup {
			if strings.Contains(q, "$1") {
				exec(q, queue)
			} else {
				exec(q)
			}
		}
		for _, tb := range d.scratchTables {
			exec("VACUUM ANALYZE " + tb)
		}
		var size int64
		for _, tb := range append([]string{"backstop_tasks"}, d.scratchTables...)[min(1, len(d.scratchTables)):] {
			var n int64
			if err := conn.QueryRow(ctx, "SELECT pg_total_relation_size($1::regclass)", tb).Scan(&n); err != nil {
				t.Fatal(err)
			}
			size += n
		}
		fmt.Printf("design=%s tables=%s indexes=%d size_MB=%.1f\n", d.name, strings.Join(d.scratchTables, ","), d.scratchIndexes, float64(size)/(1<<20))
	}
	if os.Getenv("BACKSTOP_NARROW_PRINT") != "" {
		for _, d := range designs {
			c, st := d.variant(3)
			fmt.Printf("-- %s claim\n%s\n-- %s settle\n%s\n", d.name, c, d.name, st)
		}
	}

	const n = 1000
	type step struct {
		d     narrowDesign
		level int // 0: the floor's statements; variant's levels
	}
	var steps []step
	for _, d := range designs {
		for l := range 4 {
			steps = append(steps, step{d, l})
		}
	}
	// lsn is the server's WAL insert position: around a statement, its
	// WAL and its data-modifying CTEs' (which EXPLAIN's plan totals leave
	// out when the statement's answer does not read them), and whatever
	// other sessions of the server wrote meanwhile.
	lsn := func() int64 {
		var b int64
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").Scan(&b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	running := func(d narrowDesign) ([]string, []string) {
		rows, err := conn.Query(ctx, d.running, queue)
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
		return ids, execs
	}
	pair := func(r int, st step) {
		d := st.d
		claim, settle, name := d.floorClaim, d.floorSettle, d.name+"-floor"
		if st.level > 0 {
			claim, settle = d.variant(st.level)
			name = d.name + []string{"", "-returning", "-events", "-full"}[st.level]
		}
		if d.name == "a-tasks" && st.level == 0 {
			exec("SET session_replication_role = replica")
			defer exec("SET session_replication_role = DEFAULT")
		}
		at := time.Now()
		l0 := lsn()
		claimed := measureNarrow(t, conn, pid, claim, firstArgs(claim, queue, at, n, "narrow", at.Add(time.Minute))...)
		l1 := lsn()
		ids, execs := running(d)
		m := len(ids)
		if m != n {
			t.Fatalf("%s: %d tasks running after the claim, want %d", name, m, n)
		}
		done := make([]time.Time, m)
		for i := range done {
			done[i] = time.Now()
		}
		var keys any = textArray(ids)
		if d.bigint {
			k := make([]int64, m)
			for i, id := range ids {
				fmt.Sscan(id, &k[i])
			}
			keys = k
		}
		l2 := lsn()
		settled := measureNarrow(t, conn, pid, settle, firstArgs(settle, keys, textArray(execs), timeArray(done),
			make([]bool, m), make([]int32, m), make([]int32, m), "")...)
		l3 := lsn()
		if left, _ := running(d); len(left) != 0 {
			t.Fatalf("%s: %d tasks left running", name, len(left))
		}
		printHotLine(r, name, m, claimed.hotCost, settled.hotCost)
		fmt.Printf("round=%d db=%s wal claim_walrec_all=%d claim_walB_all=%d settle_walrec_all=%d settle_walB_all=%d claim_lsnB=%d settle_lsnB=%d\n",
			r, name, claimed.allWalR, claimed.allWalB, settled.allWalR, settled.allWalB, l1-l0, l3-l2)
	}
	for r := range rounds {
		for k := range steps {
			pair(r, steps[(k+r)%len(steps)])
		}
		claimed := measureNarrow(t, conn, pid, floorClaim, n)
		ids := floorRunning(t, conn)
		done := measureNarrow(t, conn, pid, floorDone, ids)
		printHotLine(r, "floor", len(ids), claimed.hotCost, done.hotCost)
	}

	// The readers, on designs holding both finished and pending tasks,
	// their tables analyzed as autovacuum would.
	for _, d := range designs {
		for _, tb := range d.scratchTables {
			exec("ANALYZE " + tb)
		}
	}
	exec("ANALYZE backstop_tasks")
	for _, d := range designs {
		if d.get == "" {
			continue
		}
		table := "backstop_tasks"
		if len(d.scratchTables) > 1 {
			table = d.scratchTables[1]
		}
		// 500 finished and 500 pending tasks' keys, by the wide row.
		keysOf := func(where string) []string {
			rows, err := conn.Query(ctx, "SELECT "+d.keyOf+"::text FROM "+table+" WHERE queue = $1 AND "+where+" LIMIT 500", queue)
			if err != nil {
				t.Fatal(err)
			}
			ks, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			return ks
		}
		var finishedWhere, pendingWhere string
		switch {
		case d.name == "a-tasks":
			finishedWhere, pendingWhere = "state = 'succeeded'", "state = 'pending'"
		case strings.HasPrefix(d.name, "d-"):
			out := d.scratchTables[2]
			finishedWhere = d.keyOf + " IN (SELECT key FROM " + out + ")"
			pendingWhere = d.keyOf + " NOT IN (SELECT key FROM " + out + ")"
		default:
			finishedWhere, pendingWhere = "state = 'succeeded'", "state = 'pending' AND "+d.keyOf+" IN (SELECT "+d.keyOf+" FROM "+d.scratchTables[0]+" WHERE state = 'pending')"
		}
		ks := append(keysOf(finishedWhere), keysOf(pendingWhere)...)
		var keys any = textArray(ks)
		if d.bigint {
			k := make([]int64, len(ks))
			for i, id := range ks {
				fmt.Sscan(id, &k[i])
			}
			keys = k
		}
		for r := range 7 {
			g := measureNarrow(t, conn, pid, d.get, keys)
			ld := measureNarrow(t, conn, pid, d.listDone, queue)
			lp := measureNarrow(t, conn, pid, d.listPending, queue)
			fmt.Printf("round=%d reader=%s get_n=%d get_cpu=%d get_hit=%d | done100_cpu=%d done100_hit=%d | pending100_cpu=%d pending100_hit=%d\n",
				r, d.name, len(ks), g.CPUus, g.Plan.Hit, ld.CPUus, ld.Plan.Hit, lp.CPUus, lp.Plan.Hit)
		}
	}

	// The enqueue's inserts, bare (design a with its triggers off): 1,000
	// tasks into every table of each design, in a rotating order.
	for r := range 7 {
		for k := range designs {
			d := designs[(k+r)%len(designs)]
			if d.name == "a-tasks" {
				exec("SET session_replication_role = replica")
			}
			c := measureNarrow(t, conn, pid, d.enqueue, queue, "enqueued-"+queue)
			if d.name == "a-tasks" {
				exec("SET session_replication_role = DEFAULT")
			}
			fmt.Printf("round=%d enqueue=%s cpu=%d walrec=%d walB=%d\n", r, d.name, c.CPUus, c.allWalR, c.allWalB)
		}
	}
}

// narrowCost is hotCost with the WAL of the whole statement: the plan's
// total leaves out the data-modifying CTEs that nothing reads (they run
// to completion after the plan), whose own nodes count theirs.
type narrowCost struct {
	hotCost
	allWalR, allWalB int64
}

// measureNarrow is measureHot, adding the WAL of the CTEs nothing reads.
func measureNarrow(t *testing.T, conn *pgxpool.Conn, pid int, sql string, args ...any) narrowCost {
	var raw string
	c0 := backendCPU(t, pid)
	if err := conn.QueryRow(t.Context(), "EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) "+sql, args...).Scan(&raw); err != nil {
		t.Fatalf("%v\n%s", err, sql)
	}
	cpu := (backendCPU(t, pid) - c0) / 1000
	var c []hotCost
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		t.Fatal(err)
	}
	c[0].CPUus = cpu
	var tree []struct {
		Plan map[string]any `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(raw), &tree); err != nil {
		t.Fatal(err)
	}
	scanned := map[string]bool{}
	var ctes []map[string]any
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if name, ok := n["CTE Name"].(string); ok {
			scanned[name] = true
		}
		if sub, ok := n["Subplan Name"].(string); ok && strings.HasPrefix(sub, "CTE ") {
			ctes = append(ctes, n)
		}
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			walk(k.(map[string]any))
		}
	}
	walk(tree[0].Plan)
	out := narrowCost{hotCost: c[0], allWalR: c[0].Plan.WalR, allWalB: c[0].Plan.WalB}
	for _, n := range ctes {
		if !scanned[strings.TrimPrefix(n["Subplan Name"].(string), "CTE ")] {
			r, _ := n["WAL Records"].(float64)
			b, _ := n["WAL Bytes"].(float64)
			out.allWalR += int64(r)
			out.allWalB += int64(b)
		}
	}
	return out
}
