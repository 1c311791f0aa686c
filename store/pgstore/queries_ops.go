package pgstore

// The query layer's statements for store.Ops (leadership, retention,
// statistics, views); queries.go holds the hot path's.

// sqlHasEvents: whether backstop_events (the task history, subjects = task
// id; it comes with the dead-letter migration) exists in the current
// schema, so retention deletes a task's events with it.
const sqlHasEvents = `SELECT EXISTS (SELECT 1 FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = 'backstop_events' AND column_name = 'subjects')`

// deleteTasks deletes a batch chosen by doomed (a SELECT of ids, locked
// with SKIP LOCKED so two leaders or an operator never wait on each other)
// with its executions, payloads and, with events, its events.
func deleteTasks(doomed string, events bool) string {
	q := `WITH doomed AS (` + doomed + `),
ex AS (DELETE FROM backstop_executions e USING doomed d WHERE e.task_id = d.id),
pl AS (DELETE FROM backstop_payloads p USING doomed d WHERE p.task_id = d.id),`
	if events {
		q += `
` + deleteTaskEvents("doomed") + `,`
	}
	return q + `
del AS (DELETE FROM backstop_tasks t USING doomed d WHERE t.id = d.id RETURNING 1)
SELECT count(*) FROM del`
}

// sqlDoomedFinished picks a retention batch through backstop_tasks_finished,
// oldest first. The index's own term is repeated: a state bound as a
// parameter proves no partial index, so without it the generic plan of the
// prepared statement is a scan of every task, history included.
const sqlDoomedFinished = `SELECT id FROM backstop_tasks
	WHERE state IN ('succeeded', 'canceled') AND state = $1 AND finalized_at < $2
	ORDER BY finalized_at LIMIT $3 FOR UPDATE SKIP LOCKED`

// sqlStatsTables: every Backstop table of the current schema with its
// indexes and TOAST (ops.go: tableSizes).
const sqlStatsTables = `SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
  AND c.relname LIKE 'backstop\_%'
ORDER BY c.relname`

var sqlViewPendingRetries = selectTasks + `
WHERE t.state = 'scheduled' AND t.attempt > 0
ORDER BY t.run_at, t.id LIMIT $1`

var sqlViewRetryExhausted = selectTasks + `
WHERE t.state = 'dead' AND t.dead_reason = 'attempts_exhausted'
ORDER BY t.last_seen DESC, t.id LIMIT $1`

var sqlViewRecentFailures = `SELECT ` + taskCols("t") + ` FROM backstop_tasks t
JOIN (
	SELECT task_id, max(finished_at) AS last_failure FROM backstop_executions
	WHERE outcome IN ('transient_error', 'permanent_error', 'timeout', 'lease_expired') AND finished_at >= $1
	GROUP BY task_id
) f ON f.task_id = t.id
ORDER BY f.last_failure DESC, t.id LIMIT $2`

// deleteTaskEvents is two CTEs that delete the events of the tasks a CTE
// named (a column id): the log rows all of whose events are theirs go; in
// a row shared with tasks that stay (a claim of 100 tasks, some still
// retained) their elements are blanked (subject, attributes and body
// NULL), so that the other events keep their place in the row (their
// cursors) and readers skip the blanks.
func deleteTaskEvents(cte string) string {
	ids := `(SELECT array_agg(id) FROM ` + cte + `)`
	return tasksEventRows(cte, ids) + `, ev_rows AS (
	DELETE FROM backstop_events v USING ev_cand c
	WHERE v.xid = c.xid AND v.seq = c.seq AND array_remove(v.subjects, NULL) <@ ` + ids + `
), ev_blank AS (
	UPDATE backstop_events v SET subjects = x.subjects, attributes = x.attributes, bodies = x.bodies
	FROM (SELECT e.xid, e.seq,
			array_agg(CASE WHEN u.gone THEN NULL ELSE u.subject END ORDER BY u.i) AS subjects,
			json_agg(CASE WHEN u.gone THEN NULL ELSE u.attributes END ORDER BY u.i) AS attributes,
			json_agg(CASE WHEN u.gone THEN NULL ELSE u.body END ORDER BY u.i) AS bodies
		FROM backstop_events e CROSS JOIN LATERAL (SELECT u.*, coalesce(u.subject IN (SELECT id FROM ` + cte + `), false) AS gone
			FROM ROWS FROM (unnest(e.subjects), json_array_elements(e.attributes), json_array_elements(e.bodies))
				WITH ORDINALITY AS u(subject, attributes, body, i)) u
		WHERE (e.xid, e.seq) IN (SELECT xid, seq FROM ev_cand) AND NOT array_remove(e.subjects, NULL) <@ ` + ids + `
		GROUP BY e.xid, e.seq) x
	WHERE v.xid = x.xid AND v.seq = x.seq
)`
}
