package pgstore

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// This file is the store's query layer: every SQL statement of the engine's
// hot path and reads is here; queries_ops.go holds maintenance and stats,
// dlq.go its own statements next to the code that runs them.

// taskColumns is every column of backstop_tasks but payload, in the order
// scanTask reads them.
var taskColumns = []string{
	"id", "queue", "kind", "state", "priority", "attempt", "max_attempts",
	"payload_size", "payload_spilled", "attributes", "run_at", "created_at", "updated_at",
	"timeout_us", "deadline", "retry_policy", "idempotency_key", "merge_key", "merge_count",
	"progress_total", "progress_completed", "complexity", "trace_parent", "last_error",
	"worker_id", "execution_id", "attempted_at", "lease_expires_at", "cancel_requested_at", "finalized_at",
	"dead_reason", "first_seen", "last_seen", "dead_count", "replay_count", "dlq_status", "replayed_from",
	"unique_until",
}

// taskCols lists the task columns qualified by alias, then the payload
// twice: inline, and from backstop_payloads when spilled. The side table
// is read by a subquery that runs only for a spilled row: a join would
// make the planner hash or probe every row (a claim of 1,000 tasks built
// a hash table of all of them to find none).
func taskCols(alias string) string {
	var b strings.Builder
	for _, c := range taskColumns {
		b.WriteString(alias + "." + c + ", ")
	}
	b.WriteString(alias + ".payload, CASE WHEN " + alias + ".payload_spilled THEN (SELECT p.data FROM backstop_payloads p WHERE p.task_id = " + alias + ".id) END")
	return b.String()
}

// selectTasks reads whole tasks, payload included.
var selectTasks = "SELECT " + taskCols("t") + " FROM backstop_tasks t"

// selectSummaries reads tasks without their payloads (ListFilter's
// WithoutPayload): the two payload columns scanTask reads are NULL, so
// neither the inline payload (TOAST) nor backstop_payloads is read;
// payload_size says how long the payload is.
var selectSummaries = "SELECT " + summaryCols("t") + " FROM backstop_tasks t"

// summaryCols is taskCols without the payloads.
func summaryCols(alias string) string {
	var b strings.Builder
	for _, c := range taskColumns {
		b.WriteString(alias + "." + c + ", ")
	}
	b.WriteString("NULL::json, NULL::bytea")
	return b.String()
}

var sqlGetTask = selectTasks + " WHERE t.id = $1"

const sqlTaskState = `SELECT state FROM backstop_tasks WHERE id = $1`

// A succeeded task's last attempt is not a row of backstop_executions:
// the task row holds all of it (execution_id, attempt, worker_id,
// attempted_at, finalized_at), and the success settle writes nothing else
// (migration 00016). succeededExecutions reads those executions from the
// task rows of the FROM item from (aliased t); a row whose execution_id
// is already in backstop_executions (written before 00016, or an
// execution id left by an earlier attempt) gives none.
func succeededExecutions(from string) string {
	return `SELECT t.execution_id, t.id, t.attempt, coalesce(t.worker_id, ''),
	coalesce(t.attempted_at, t.finalized_at), t.finalized_at, 'succeeded', NULL::text, NULL::text
FROM ` + from + `
WHERE t.state = 'succeeded' AND t.execution_id IS NOT NULL
	AND NOT EXISTS (SELECT 1 FROM backstop_executions x WHERE x.execution_id = t.execution_id)`
}

var sqlExecutions = `
SELECT execution_id, task_id, attempt, worker_id, started_at, finished_at, outcome, error, error_detail
FROM backstop_executions WHERE task_id = $1
UNION ALL
` + succeededExecutions("backstop_tasks t") + ` AND t.id = $1
ORDER BY 5, 3, 1`

// claimPickRows is the claim's pick, the part that walks the claim index:
// the next claimable rows of queue $1 at $2, at most $3, locked (%s: the
// claim's kind filter).
const claimPickRows = `SELECT ctid AS tid FROM backstop_tasks
	WHERE state = 'pending' AND queue = $1 AND run_at <= $2
	  AND (deadline IS NULL OR deadline > $2)%s
	  AND NOT EXISTS (SELECT 1 FROM backstop_queues pq WHERE pq.name = $1)
	ORDER BY priority DESC, run_at, id
	LIMIT $3
	FOR UPDATE SKIP LOCKED`

// ClaimPickSQL is the claim's pick without a kind filter ($1 queue, $2
// now, $3 how many), for measuring what the claim index costs
// (backstop bench sustain --explain).
func ClaimPickSQL() string { return strings.Replace(claimPickRows, "%s", "", 1) }

// ClaimCursorPickSQL is the claim's pick from a claim cursor's position
// (cursor.go) without a kind filter: ClaimPickSQL's parameters, then $4
// the position's priority, $5 its run_at, $6 its id.
func ClaimCursorPickSQL() string { return strings.Replace(claimPickRows, "%s", cursorFilter(4), 1) }

// Claim: lock the next claimable rows, skipping rows other claimers hold,
// and lease them in the same statement. The UPDATE finds the locked rows
// by their tuple ids (a Tid Scan, in heap order), not by a primary-key
// lookup each: a row this statement locked cannot move before its UPDATE.
var claimPick = `
WITH picked AS (
	` + claimPickRows + `
), ` + claimSeq + `, claimed AS (
	UPDATE backstop_tasks c SET
		state = 'running',
		attempt = c.attempt + 1,
		worker_id = $4,
		execution_id = %e,
		attempted_at = $2,
		lease_expires_at = $5,
		updated_at = $2,
		event_links = c.event_links || s.seq
	FROM claim_seq s WHERE c.ctid = ANY(ARRAY(SELECT tid FROM picked))
	RETURNING c.*, s.seq AS ev_seq
), ` + claimEvents + `%c
`

// Every claim counts its batch (countedMove): it moves pending tasks to
// running and changes nothing else of a task's group.
var (
	sqlClaim      = formatClaim("")
	sqlClaimKinds = formatClaim("\n\t  AND kind = ANY($6::text[])")
	// sqlClaimIDs claims the tasks the limited claim admitted ($6), which
	// its transaction already holds locked.
	sqlClaimIDs = formatClaim("\n\t  AND id = ANY($6::text[])")
	// sqlClaimCursor and sqlClaimCursorKinds pick from the claim cursor's
	// position ($6 priority, $7 run_at, $8 id; $9 kinds): cursor.go.
	sqlClaimCursor      = formatClaim(cursorFilter(6))
	sqlClaimCursorKinds = formatClaim(cursorFilter(6) + "\n\t  AND kind = ANY($9::text[])")
)

// sqlLimitCandidates: the limited claim's candidates, in claim order,
// locked: the claimable tasks ($4: kinds, empty for any) outside the
// budgets that are full (a row of $5, $6, $7 per full budget: the limit's
// kind, ” for any; its per attribute, ” for none; the value).
const sqlLimitCandidates = `
SELECT id, kind, coalesce(attributes, '{}'::jsonb) FROM backstop_tasks t
WHERE state = 'pending' AND queue = $1 AND run_at <= $2
  AND (deadline IS NULL OR deadline > $2)
  AND (cardinality($4::text[]) = 0 OR kind = ANY($4::text[]))
  AND NOT EXISTS (SELECT 1 FROM backstop_queues pq WHERE pq.name = $1)
  AND NOT EXISTS (SELECT 1 FROM unnest($5::text[], $6::text[], $7::text[]) f(kind, per, value)
	WHERE (f.kind = '' OR f.kind = t.kind) AND (f.per = '' OR coalesce(t.attributes ->> f.per, '') = f.value))
ORDER BY priority DESC, run_at, id
LIMIT $3
FOR UPDATE SKIP LOCKED`

// formatClaim is the claim with kindFilter in its pick, counting its
// batch (countedMove), with its forms for the schemas before the count
// mark and before the execution id sequence.
func formatClaim(kindFilter string) string {
	claim := func(execID, counted string) string {
		return strings.NewReplacer("%s", kindFilter, "%e", execID, "%c", counted).Replace(claimPick) +
			"SELECT " + taskCols("t") + " FROM claimed t"
	}
	counted := ", " + countedMove("claimed", "pending", "running")
	return withOlderForms(claim(execIDs, counted),
		olderForm{countedVersion, claim(randomExecIDs, "")},
		olderForm{execIDsVersion, claim(randomExecIDs, counted)})
}

// execIDs is a claimed attempt's execution id: one random uuid's first
// 24 characters per claim (claim_seq's exec_prefix), then the next number
// of a sequence cached per connection as 12 hex digits, so the id still
// reads as a uuid and is unique; randomExecIDs, a random uuid per row,
// cost about 10 % more of the claim's CPU. The sequence is migration
// 00061's (execIDsVersion).
const (
	execIDs        = `s.exec_prefix || lpad(to_hex(nextval('backstop_execution_ids') % 281474976710656), 12, '0')`
	randomExecIDs  = `gen_random_uuid()::text`
	execIDsVersion = 61
)

// leaseHeld is "task t is running under the execution i.execution_id",
// written as ONE condition over both t and i so that the planner applies
// it where the join meets each task, found by id. Written as two,
// "t.state = 'running'" is a filter on t alone, estimated from statistics;
// taken while the tasks were pending (autovacuum's analyze after a big
// enqueue), they put the running tasks at one row, and the planner then
// scanned the whole table and joined every row against every input row:
// 1-12 s per batch on 100,000 tasks, the drain's "stall", which also held
// a heartbeat's row locks for as long and made the settles wait on them.
const leaseHeld = `CASE WHEN t.execution_id = i.execution_id THEN t.state = 'running' END`

// Heartbeat: extend the leases still held by the named executions. Input
// arrays: task ids, execution ids, has-progress flags, totals, completed.
// The second %s is the lock clause: a batch takes the rows it can lock now (SKIP
// LOCKED) and never waits for one another transaction holds: a settle of
// that very attempt (it is finishing), an operator's cancel, the
// lease-expiry sweep. Such a beat is answered from the statement's
// snapshot (still this execution's lease: held, not lost) and its lease is
// not extended this time; the next beat, a third of the lease later,
// extends it. A single beat (the remote protocol, which tells the worker
// its new expiry) waits as before: one row cannot take part in a lock-order
// deadlock.
//
// The first %s is batchOfOne for the single beat, which is run from its
// generic plan (a key lookup); a batch is planned for its size
// (perBatchPlan): its generic plan, expecting one beat, joins snap and
// beat back by a nested loop, quadratic in the batch (4x the custom
// plan's time at 1,000 beats).
var heartbeatSQL = `
WITH input AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::bool[], $4::int[], $5::int[])
		WITH ORDINALITY AS i(task_id, execution_id, has_progress, total, completed, idx)
), snap AS (
	-- The beats whose lease is current in the statement's snapshot.
	SELECT i.*, t.cancel_requested_at IS NOT NULL AS cancel_requested
	FROM input i JOIN backstop_tasks t ON t.id = i.task_id
	WHERE %s` + leaseHeld + `
), held AS (
	-- Locked, and still current once locked; old_*: the progress before the beat.
	SELECT i.*, t.progress_total AS old_total, t.progress_completed AS old_completed
	FROM snap i JOIN backstop_tasks t ON t.id = i.task_id
	WHERE ` + leaseHeld + `
	%s
), beat AS (
	UPDATE backstop_tasks t SET
		lease_expires_at = $6,
		updated_at = $7,
		progress_total = CASE WHEN i.has_progress THEN i.total ELSE t.progress_total END,
		progress_completed = CASE WHEN i.has_progress THEN i.completed ELSE t.progress_completed END
	FROM held i
	WHERE t.id = i.task_id
	RETURNING t.id, t.execution_id, t.cancel_requested_at IS NOT NULL AS cancel_requested,
		` + beatReturning + `
), ` + beatEvents + `
-- Joined back on the lease, not the input row: a beat sent twice is held
-- twice. A beat whose row was skipped is held as of the snapshot.
SELECT s.idx, coalesce(b.cancel_requested, s.cancel_requested) FROM snap s
	LEFT JOIN beat b ON b.id = s.task_id AND b.execution_id = s.execution_id`

var (
	sqlHeartbeat     = fmt.Sprintf(heartbeatSQL, batchOfOne+" AND ", "FOR UPDATE OF t")
	sqlHeartbeatSkip = fmt.Sprintf(heartbeatSQL, "", "FOR UPDATE OF t SKIP LOCKED")
)

// Settle: apply each decision whose lease is still current (or, without an
// execution id, to a waiting task), record the settled executions (but a
// success's, which its task row holds: succeededExecutions), and wake the
// queues that got pending work, all in one statement.
var sqlSettle = `
WITH input AS (
	SELECT * FROM unnest(
		$1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[],
		$7::text[], $8::timestamptz[], $9::text[], $10::bool[], $11::bool[], $12::int[], $13::int[])
		WITH ORDINALITY AS i(task_id, execution_id, outcome, error, error_detail, finished_at,
			state, run_at, dead_reason, uncharged, has_progress, total, completed, idx)
), settled AS (
	UPDATE backstop_tasks t SET
		-- A cancel request wins over going back to wait (e.g. a release on
		-- shutdown that raced the operator's cancel).
		state = CASE WHEN i.state IN ('scheduled', 'pending') AND t.cancel_requested_at IS NOT NULL
			THEN 'canceled' ELSE i.state END,
		attempt = CASE WHEN i.uncharged THEN greatest(t.attempt - 1, 0) ELSE t.attempt END,
		updated_at = i.finished_at,
		lease_expires_at = NULL,
		run_at = CASE WHEN i.state IN ('scheduled', 'pending') THEN i.run_at ELSE t.run_at END,
		last_error = CASE WHEN i.error <> '' THEN i.error ELSE t.last_error END,
		finalized_at = CASE WHEN i.state IN ('succeeded', 'canceled', 'dead') OR t.cancel_requested_at IS NOT NULL
			THEN i.finished_at END,
		progress_total = CASE WHEN i.has_progress THEN i.total ELSE t.progress_total END,
		progress_completed = CASE WHEN i.has_progress THEN i.completed ELSE t.progress_completed END,
		dead_reason = CASE WHEN i.state = 'dead' THEN i.dead_reason ELSE t.dead_reason END,
		dlq_status = CASE WHEN i.state = 'dead' THEN 'open' ELSE t.dlq_status END,
		first_seen = CASE WHEN i.state = 'dead' THEN coalesce(t.first_seen, i.finished_at) ELSE t.first_seen END,
		last_seen = CASE WHEN i.state = 'dead' THEN i.finished_at ELSE t.last_seen END,
		dead_count = CASE WHEN i.state = 'dead' THEN t.dead_count + 1 ELSE t.dead_count END,
		-- The dead letter's group (DLQGroups), of the reason and error it dies with.
		dlq_group = CASE WHEN i.state = 'dead'
			THEN backstop_dlq_group(i.dead_reason, CASE WHEN i.error <> '' THEN i.error ELSE t.last_error END) END
	FROM input i
	WHERE ` + batchOfOne + ` AND t.id = i.task_id AND CASE
		WHEN i.execution_id = '' THEN t.state IN ('scheduled', 'pending')
		ELSE t.state = 'running' AND t.execution_id = i.execution_id END
	RETURNING i.idx, t.id, t.queue, t.state, i.execution_id, i.uncharged, t.attempt, t.worker_id,
		t.attempted_at, i.finished_at, i.outcome, i.error, i.error_detail,
		t.kind, t.attributes, t.run_at, t.dead_reason, t.dead_count
), ` + settleEvents + `, recorded AS (
	INSERT INTO backstop_executions
		(execution_id, task_id, attempt, worker_id, started_at, finished_at, outcome, error, error_detail)
	SELECT execution_id, id, CASE WHEN uncharged THEN attempt + 1 ELSE attempt END,
		coalesce(worker_id, ''), coalesce(attempted_at, finished_at), finished_at, outcome,
		nullif(error, ''), nullif(error_detail, '')
	FROM settled WHERE execution_id <> '' AND state <> 'succeeded'
)
SELECT idx FROM settled
UNION ALL
SELECT 0 FROM (SELECT DISTINCT queue FROM settled WHERE state = 'pending') q
	CROSS JOIN LATERAL pg_notify('` + wakeupChannel + `', q.queue)`

// Settle, the hot path: a batch of successes with their leases current.
// It writes the task rows and their events, and no execution rows
// (succeededExecutions). Input arrays: task ids, execution ids, finish times, has-progress flags,
// totals, completed.
var sqlSettleSucceeded = formatSettleSucceeded()

// formatSettleSucceeded is the success settle, counting its batch
// (countedMove: each settled task goes from running to succeeded, nothing
// else of its group changes), with its form for the schemas before the
// count mark.
func formatSettleSucceeded() string {
	return withOlderForms(strings.Replace(settleSucceededSQL, "%c", ", "+countedMove("settled", "running", "succeeded"), 1),
		olderForm{countedVersion, strings.Replace(settleSucceededSQL, "%c", "", 1)})
}

// batchOfOne is true of every input row (idx counts 1..n), and it makes
// the planner expect ONE row of input whatever the batch's size: a
// range over a column without statistics is estimated at 0.5 % of the
// ten rows an array parameter is taken to hold. The settles and the
// single heartbeat are run from a prepared statement's generic plan, which is
// costed without the arrays; expecting ten rows, that plan
// hash-joined them against a scan of the whole table below ~80 pages of
// tasks and kept doing so as the table grew. Expecting one, it finds each
// row by the primary key on any table of more than a few pages, and on
// one never vacuumed (taken to have 10 pages); a vacuumed table of up to
// ~5 pages (~150 rows) is still scanned (docs/benchmarks.md, "The success
// settle's generic plan").
const batchOfOne = `i.idx BETWEEN 1 AND cardinality($1::text[])`

var settleSucceededSQL = `
WITH input AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::bool[], $5::int[], $6::int[])
		WITH ORDINALITY AS i(task_id, execution_id, finished_at, has_progress, total, completed, idx)
), ` + settleLink + `, settled AS (
	UPDATE backstop_tasks t SET
		state = 'succeeded',
		event_links = t.event_links || q.link,
		updated_at = i.finished_at,
		finalized_at = i.finished_at,
		lease_expires_at = NULL,
		progress_total = CASE WHEN i.has_progress THEN i.total ELSE t.progress_total END,
		progress_completed = CASE WHEN i.has_progress THEN i.completed ELSE t.progress_completed END
	FROM input i, settle_link q
	WHERE ` + batchOfOne + ` AND t.id = i.task_id AND ` + leaseHeld + `
	RETURNING i.idx, t.id, i.execution_id, t.attempt, t.worker_id, t.attempted_at, i.finished_at,
		t.queue, t.kind, t.attributes, t.dlq_status, q.link AS ev_link
), ` + succeededEvents + `%c
SELECT idx FROM settled`

// RequestCancel: waiting tasks are canceled at once, running ones marked;
// the event names the actor ($3).
var sqlRequestCancel = `
WITH c AS (
	UPDATE backstop_tasks t SET
		state = CASE WHEN t.state = 'running' THEN t.state ELSE 'canceled' END,
		finalized_at = CASE WHEN t.state = 'running' THEN t.finalized_at ELSE $2 END,
		cancel_requested_at = coalesce(t.cancel_requested_at, $2),
		updated_at = $2
	FROM backstop_tasks o -- o: the row before this update
	WHERE t.id = $1 AND t.state IN ('scheduled', 'pending', 'buffered', 'running') AND o.id = t.id
	RETURNING t.*, o.state AS from_state
), ` + cancelEvents + `
SELECT ` + taskCols("t") + ` FROM c t`

var sqlExpiredLeases = selectTasks + `
WHERE t.state = 'running' AND t.lease_expires_at < $1
ORDER BY t.lease_expires_at, t.id
LIMIT $2`

var sqlPastDeadline = selectTasks + `
WHERE t.deadline < $1 AND t.deadline IS NOT NULL AND t.state IN ('scheduled', 'pending')
ORDER BY t.deadline, t.id
LIMIT $2`

// PromoteScheduled: due scheduled tasks become pending; their queues wake.
const sqlPromote = `
WITH due AS (
	SELECT id FROM backstop_tasks
	WHERE state = 'scheduled' AND run_at <= $1
	ORDER BY run_at, id
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), promoted AS (
	UPDATE backstop_tasks t SET state = 'pending', updated_at = $1
	FROM due WHERE t.id = due.id
	RETURNING t.queue
), per_queue AS (
	SELECT queue, count(*) AS n FROM promoted GROUP BY queue
)
SELECT q.n FROM per_queue q CROSS JOIN LATERAL pg_notify('` + wakeupChannel + `', q.queue)`

// listQuery builds a List statement for f from its conditions (listWhere
// and the cursor's), the parameter of its limit and its form (listForm).
// f.WithoutPayload reads summaries, f.Newest the ids' descending order.
//
// In the sorted form the page's ids are picked by the id as an expression
// (the id concatenated with the empty string, in the id's collation: the
// same order), which no index gives, so that the planner reads the
// states' partial indexes (the claim index for pending tasks, the trigram
// index of the errors and the dead letters' indexes…) instead of walking
// the primary key past every task that does not match: the whole table
// when few match (the history behind a queue's pending tasks, the dead
// letters ahead of them; docs/benchmarks.md). It costs the matching rows,
// sorted, which listForm bounds. A queue's pending tasks and dead letters
// by their error's text are always read so (their indexes are small, the
// walk past the rest is not).
func listQuery(f store.ListFilter, where []string, limitArg int, form listForm) string {
	q := selectTasks
	if f.WithoutPayload {
		q = selectSummaries
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	dir, limit := store.OrderDir(f.Newest), " LIMIT $"+strconv.Itoa(limitArg)
	if form == listSorted && len(f.States) > 1 {
		// One arm per state, so that each reads its state's partial index
		// (an index's predicate names one state or a few; a list of
		// states proves none), merged.
		// A state of no task has no arm (listWhere's condition keeps
		// the filter exact).
		var arms []string
		for _, st := range f.States {
			if !slices.Contains(bt.States, st) {
				continue
			}
			arms = append(arms, "(SELECT t.id FROM backstop_tasks t"+cond+" AND t.state = '"+string(st)+"'"+
				" ORDER BY t.id || '' "+dir+limit+")")
		}
		return q + " WHERE t.id IN (SELECT u.id FROM (" + strings.Join(arms, " UNION ALL ") + ") u" +
			" ORDER BY u.id " + dir + limit + ")" + " ORDER BY t.id " + dir + limit
	}
	if form == listSorted || f.Queue != "" && slices.Equal(f.States, []bt.State{bt.StatePending}) ||
		f.ErrorContains != "" && slices.Equal(f.States, []bt.State{bt.StateDead}) {
		return q + " WHERE t.id IN (SELECT t.id FROM backstop_tasks t" + cond + " ORDER BY t.id || '' " + dir + limit + ")" +
			" ORDER BY t.id " + dir + limit
	}
	return q + cond + " ORDER BY t.id " + dir + limit
}

// Enqueue statements use scalar parameters only (no arrays), so that they
// run through any database/sql PostgreSQL driver, not just pgx.

// insertColumns are the columns an enqueue writes, in insertArgs order.
var insertColumns = []string{
	"id", "queue", "kind", "state", "priority", "attempt", "max_attempts",
	"payload", "payload_size", "payload_spilled", "attributes", "run_at", "created_at", "updated_at",
	"timeout_us", "deadline", "retry_policy", "idempotency_key", "merge_key",
	"progress_total", "progress_completed", "complexity", "trace_parent", "replayed_from",
}

// maxInsertRows keeps a multi-row INSERT well below PostgreSQL's limit of
// 65535 parameters per statement.
var maxInsertRows = 1000

// sqlInsertTasks inserts n tasks. onConflict is "(id)" for tasks without
// keys (an existing id is reported, not overwritten) and "" for tasks with
// idempotency or merge keys, where any unique index may conflict. Each
// inserted task gets its task.enqueued event in the same statement; the
// actor is the last parameter ($n*len(insertColumns)+1). (A workflow
// plan's tasks go in one statement of arrays: insertTaskArraysSQL.)
func sqlInsertTasks(n int, onConflict string) string {
	var b strings.Builder
	b.WriteString("WITH " + enqueueSeq + ", ins AS (INSERT INTO backstop_tasks (")
	b.WriteString(strings.Join(insertColumns, ", "))
	b.WriteString(", event_links) VALUES ")
	writeLinkedValues(&b, n, len(insertColumns))
	b.WriteString(" ON CONFLICT " + onConflict + " DO NOTHING")
	b.WriteString(" RETURNING " + enqueuedReturning + "), ")
	b.WriteString(enqueuedEvents(n*len(insertColumns) + 1))
	b.WriteString(" SELECT id FROM ins")
	return b.String()
}

// countedInsert counts the rows an enqueue's insert wrote (ins: tasks
// with no dead-letter status and no group) into the count deltas and
// marks the statement counted for an INSERT: the insert trigger finds the
// mark, clears it and appends nothing, and the dead letters' groups
// trigger returns at once. With no row inserted (every id taken) it
// appends nothing and leaves no mark.
const countedInsert = `counted AS (
	INSERT INTO backstop_task_count_deltas (queue, state, dlq_status, n)
	SELECT queue, state, '', count(*) FROM ins
	WHERE set_config('backstop.counted', 'INSERT', true) <> ''
	GROUP BY 1, 2)`

// sqlInsertPayloads writes n spilled payloads (task_id, data).
func sqlInsertPayloads(n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO backstop_payloads (task_id, data) VALUES ")
	writeValues(&b, n, 2, nil)
	b.WriteString(" ON CONFLICT (task_id) DO UPDATE SET data = EXCLUDED.data")
	return b.String()
}

// sqlNotify wakes n queues.
func sqlNotify(n int) string {
	var b strings.Builder
	b.WriteString("SELECT count(pg_notify('" + wakeupChannel + "', q)::text) FROM (VALUES ")
	writeValues(&b, n, 1, []string{"::text"})
	b.WriteString(") AS v(q)")
	return b.String()
}

// writeValues writes n tuples of cols parameters: ($1, $2), ($3, $4)…
func writeValues(b *strings.Builder, n, cols int, casts []string) {
	p := 1
	for r := range n {
		if r > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for c := range cols {
			if c > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(p))
			if c < len(casts) {
				b.WriteString(casts[c])
			}
			p++
		}
		b.WriteByte(')')
	}
}

// sqlFindIdempotent finds the task holding idempotency key $1 at $2: a
// live one without a window, or the newest one whose window is open.
var sqlFindIdempotent = selectTasks + `
WHERE t.idempotency_key = $1 AND ((t.unique_until IS NULL AND t.state IN ('scheduled', 'pending', 'running', 'buffered'))
	OR t.unique_until > $2)
ORDER BY t.created_at DESC, t.id DESC LIMIT 1`

// sqlLockIdempotent serializes the enqueues of one windowed idempotency
// key until their transactions end: the one-live-task index does not hold
// windowed tasks.
const sqlLockIdempotent = `SELECT pg_advisory_xact_lock(hashtext('backstop_idempotency'), hashtext($1))`

// sqlSetDebounce stores the quiet period $4 (µs) and max-wait deadline $5
// of debounced task $1 (kind $2, debounce key $3) once it is inserted,
// through the function the producer role may call (00048).
const sqlSetDebounce = `SELECT backstop_debounce_settings($1, $2, $3, $4, $5)`

// sqlSetUniqueUntil opens the window $3 of task $1 (idempotency key $2)
// once it is inserted, through the function the producer role may call
// (00048): the role has no grant on unique_until.
const sqlSetUniqueUntil = `SELECT backstop_unique_window($1, $2, $3)`

var sqlFindMergeable = `SELECT ` + taskCols("t") + ` FROM backstop_tasks t
WHERE t.kind = $1 AND t.merge_key = $2 AND t.state IN ('scheduled', 'pending')
FOR UPDATE OF t`

const sqlIDExists = `SELECT count(*) FROM backstop_tasks WHERE id = $1`

// sqlMerge stores a merged payload ($2 inline, or NULL when spilled) at
// $5. It writes only the merge columns, the producer role's (roles.sql).
var sqlMerge = `
WITH m AS (
	UPDATE backstop_tasks t SET
		payload = $2, payload_size = $3, payload_spilled = $4,
		merge_count = t.merge_count + 1, updated_at = $5
	WHERE t.id = $1
	RETURNING t.*
)
SELECT ` + taskCols("t") + ` FROM m t`

// sqlMergeDebounced is sqlMerge that also moves the run time to $6, the
// task scheduled or pending by it (a debounced merge), and stores the
// debounce's quiet period $7 (µs) and max-wait deadline $8; $9 and $10 are
// the task's kind and debounce key. It goes through the function the
// producer role may call (00048), which writes only a waiting task holding
// that key: the role has no grant on the run time or the state.
var sqlMergeDebounced = `SELECT ` + taskCols("t") + `
FROM backstop_debounce_merge($1, $9, $10, $2, $3, $4, $5, $6, $7, $8) t`

const sqlDeletePayload = `DELETE FROM backstop_payloads WHERE task_id = $1`
