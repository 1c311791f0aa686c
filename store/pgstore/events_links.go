package pgstore

import (
	"strconv"
	"strings"
)

// Linked event rows (migration 00015, docs/events.md "Storage and cost"):
// the hot writers (enqueue's task.enqueued, the claim's task.claimed, the
// success settle's task.started and task.succeeded) give their rows a link
// number, taken once in a CTE, append it to each task's event_links in the
// statement that writes the task row, and write the rows with it, which
// keeps them out of the GIN index on subjects (partial: WHERE link IS
// NULL). Every other writer writes unlinked rows, found by the GIN as
// before. A task's events are in seq order: each row's seq is taken after
// the task rows it belongs to are locked (the claim's picked; the settle's
// rows are numbered by an aggregate over its updated rows; an enqueued
// task does not exist before its statement). The enqueue's and the
// claim's link is their row's seq; the settle's link is a number taken
// before its UPDATE (so that the UPDATE can append it), shared by its two
// rows, and their seqs are taken after, as before.

// evSeq is the sequence every event row takes its seq from.
const evSeq = `nextval('backstop_events_seq_seq')`

// claimSeq takes the claim's row number once the picked rows are locked
// (the aggregate reads them all first), and its execution ids' prefix
// (execIDs).
const claimSeq = `claim_seq AS (
	SELECT ` + evSeq + ` AS seq, left(gen_random_uuid()::text, 24) AS exec_prefix FROM picked HAVING count(*) > 0
)`

// claimEvents: task.claimed for every claimed row ($1: the queue, $2: now,
// $4: the worker, $5: the lease's expiry), one linked row whose seq and
// link are claim_seq's number (claimed returns it as ev_seq). The queue,
// the worker and the expiry are the same for every element: the queue is
// one array_fill, and the worker and the expiry are written once, in the
// row's common body (evBody), not in each element's.
var claimEvents = `claim_events AS (
	INSERT INTO backstop_events (seq, link, type, time, times, subjects, queues, kinds, attributes, common, bodies)
	SELECT min(c.ev_seq), min(c.ev_seq), 'task.claimed', $2, NULL, array_agg(c.id),
		array_fill($1::text, ARRAY[count(*)::int]), array_agg(c.kind), json_agg(c.attributes),
		('{"worker_id":' || to_json($4::text)::text || ',"lease_expires_at":"' || ` + evTime("$5::timestamptz") + ` || '"}')::json,
		` + evBodies(`'{"execution_id":"' || c.execution_id || '","attempt":' || c.attempt || '}'`) + `
	FROM claimed c HAVING count(*) > 0
)`

// evBodies is the bodies of a hot event row: the JSON array of the
// objects the text expression obj writes for each element. It is written
// as text and parsed once, which costs the hot statements less than
// building each object with json_build_object (about 40 %: the hot
// writers' bodies were the event log's largest cost). Each obj must be
// valid JSON: values that may need escaping go through to_json, and the
// others (uuids, numbers, times formatted by evTime) need none. Readers
// compact bodies (compactJSON), so these read exactly as json_build_object's.
func evBodies(obj string) string {
	return `('[' || string_agg(` + obj + `, ',') || ']')::json`
}

// settleLink is the success settle's link number (its rows' seqs are
// taken after its UPDATE, by evBatchInsert).
const settleLink = `settle_link AS (SELECT ` + evSeq + ` AS link)`

// succeededEvents: task.started and task.succeeded for each success, one
// row each (in that order: the VALUES list's); settled returns ev_link; $7
// is the actor. The rows share their subjects, queues, kinds and
// attributes, aggregated once in one pass over settled with each row's
// times and bodies.
var succeededEvents = `succeeded_events AS (
	INSERT INTO backstop_events (seq, link, type, time, times, subjects, queues, kinds, attributes, bodies, actor)
	SELECT ` + evSeq + `, a.link, g.type, g.time, g.times, a.subjects, a.queues, a.kinds, a.attributes, g.bodies, $7::text
	FROM (SELECT min(s.ev_link) AS link, array_agg(s.id) AS subjects, array_agg(s.queue) AS queues, array_agg(s.kind) AS kinds,
		json_agg(s.attributes) AS attributes,
		max(s.started) AS started, array_agg(s.started) AS started_times,
		` + evBodies(`'{"execution_id":"' || s.execution_id || '","attempt":' || s.attempt ||
	',"worker_id":' || to_json(coalesce(s.worker_id, ''))::text || '}'`) + ` AS started_bodies,
		max(s.finished_at) AS finished, array_agg(s.finished_at) AS finished_times,
		` + evBodies(`'{"execution_id":"' || s.execution_id || '","attempt":' || s.attempt ||
	',"duration_ms":' || `+evMillis("s.started", "s.finished_at")+` || '}'`) + ` AS finished_bodies
	FROM (SELECT *, coalesce(attempted_at, finished_at) AS started FROM settled) s HAVING count(*) > 0) a
	CROSS JOIN LATERAL (VALUES ('task.started', a.started, a.started_times, a.started_bodies),
		('task.succeeded', a.finished, a.finished_times, a.finished_bodies)) g(type, time, times, bodies)
)`

// enqueueSeq is the enqueue's row number (taken first: the tasks it
// links do not exist before the statement).
const enqueueSeq = `ev_seq AS (SELECT ` + evSeq + ` AS seq)`

// writeLinkedValues is writeValues with each row's event_links appended
// (the enqueue's row number).
func writeLinkedValues(b *strings.Builder, n, cols int) {
	var v strings.Builder
	writeValues(&v, n, cols, nil)
	b.WriteString(strings.ReplaceAll(v.String(), ")", ", (SELECT ARRAY[seq] FROM ev_seq))"))
}

// enqueuedEvents: task.enqueued for every inserted row, one linked row;
// the actor is parameter actorParam.
func enqueuedEvents(actorParam int) string {
	return `ev AS (
	INSERT INTO backstop_events (seq, link, type, time, times, subjects, queues, kinds, attributes, actor, bodies)
	SELECT (SELECT seq FROM ev_seq), (SELECT seq FROM ev_seq), 'task.enqueued', max(created_at), array_agg(created_at), array_agg(id),
		array_agg(queue), array_agg(kind), json_agg(attributes), $` + strconv.Itoa(actorParam) + `::text,
		json_agg(json_build_object('merged', false, 'duplicate', false, 'state', state, 'run_at', ` + evTime("run_at") + `,
			'priority', priority, 'max_attempts', max_attempts))
	FROM ins HAVING count(*) > 0)`
}

// taskEventRows is the log rows holding events of the task named by the
// text expression task, as a FROM item aliased e: the unlinked rows (the
// partial GIN index on subjects) and the linked rows whose link the task
// row lists (the partial btree on link; a link whose rows event retention
// deleted matches nothing). Readers still keep only the elements whose subject is
// the task.
// A worker's events (subject: the worker's id) are never a task's.
func taskEventRows(task string) string {
	return `(SELECT * FROM backstop_events e WHERE e.link IS NULL AND e.subjects @> ARRAY[` + task + `] AND e.type NOT LIKE 'worker.%'
	UNION ALL
	SELECT * FROM backstop_events e WHERE e.link IS NOT NULL
		AND e.link = ANY((SELECT t.event_links FROM backstop_tasks t WHERE t.id = ` + task + `)::bigint[])) e`
}

// tasksEventRows is a CTE named ev_cand: the keys (xid, seq) of the log
// rows holding events of the tasks whose ids are the text[] expression ids
// and whose rows the CTE cte names (a column id). The task rows are read
// in the statement's snapshot, so a statement deleting them reads their
// event_seqs all the same.
func tasksEventRows(cte, ids string) string {
	return `ev_cand AS (
	SELECT xid, seq FROM backstop_events WHERE link IS NULL AND subjects && ` + ids + ` AND type NOT LIKE 'worker.%'
	UNION ALL
	SELECT xid, seq FROM backstop_events WHERE link IS NOT NULL AND link = ANY((SELECT array_agg(s.link)
		FROM backstop_tasks t CROSS JOIN LATERAL unnest(t.event_links) AS s(link)
		WHERE t.id IN (SELECT id FROM ` + cte + `))::bigint[])
)`
}
