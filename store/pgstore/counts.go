package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/internal/sqldialect"
)

// The counts of tasks by queue, state and dead-letter status are kept
// (migration 00059): every statement that writes backstop_tasks appends
// its net change to backstop_task_count_deltas from a statement-level
// trigger, in its own transaction; FoldCounts adds the deltas into
// backstop_task_counts; the counts are the two summed. A read costs the
// groups and the deltas not folded yet, not the tasks.
//
// The drain's two hot statements count themselves instead (migration
// 00060): the claim and the success settle append one delta row per group
// and state from a CTE of their own (countedMove) and mark the statement,
// so that the trigger skips it. A statement may set the mark only if it
// counts every group change of every row it writes.
//
// A batch enqueue written by COPY counts itself too (copy.go:
// sqlCopiedEvents): COPY takes no CTE, so the statement before it, which
// writes the batch's task.enqueued event, appends the batch's counts and
// marks the transaction for an INSERT; the COPY's insert trigger clears
// the mark.

var _ store.CountKeeper = (*Store)(nil)

// countedMove is a CTE, counted, that appends to the count deltas the
// move of every row of rows (a CTE of the statement's updated tasks,
// returning queue and dlq_status) from state from to state to, its queue
// and dead-letter status unchanged, as two rows per (queue, dlq_status),
// and marks the statement as counted (a setting of the transaction that
// the trigger reads and clears at the statement's end; migration 00060).
// The statement must write no other change of a task's group. With no row
// it appends nothing and leaves no mark (the trigger then counts nothing).
func countedMove(rows, from, to string) string {
	return `counted AS (
	INSERT INTO backstop_task_count_deltas (queue, state, dlq_status, n)
	SELECT g.queue, m.state, g.dlq_status, m.n
	FROM (SELECT queue, coalesce(dlq_status, '') AS dlq_status, count(*) AS n FROM ` + rows + ` GROUP BY 1, 2) g
		CROSS JOIN LATERAL (VALUES ('` + from + `', -g.n), ('` + to + `', g.n)) m(state, n)
	WHERE set_config('backstop.counted', 'UPDATE', true) <> ''
)`
}

// countedVersion is the first schema version whose trigger reads the
// mark of countedMove: below it the trigger counts every statement, and
// the hot statements run without their own count (forms.go).
const countedVersion = 60

// insertsCounted: the schema's insert trigger reads the mark of
// countedInsert, so a plan's task insert counts its own rows.
func (s *Store) insertsCounted() bool {
	v := s.schemaAt.Load()
	return v == 0 || v >= countedVersion
}

// sqlCounts answers CountByQueue in one statement (one snapshot, so the
// counts agree with each other and with the oldest pending run_at): the
// kept counts plus the deltas, and for each queue with pending tasks its
// earliest pending run_at, from the claim index (queue, priority DESC,
// run_at): the first entry of each of the queue's priorities, found by a
// skip from one priority to the next (one probe per priority in use).
// Columns: sqldialect.ScanQueueCounts'.
const sqlCounts = `WITH c AS (
	SELECT queue, state, dlq_status, sum(n) AS n FROM (
		SELECT queue, state, dlq_status, n FROM backstop_task_counts
		UNION ALL
		SELECT queue, state, dlq_status, n FROM backstop_task_count_deltas) u
	GROUP BY 1, 2, 3 HAVING sum(n) <> 0)
SELECT c.queue, c.state, c.dlq_status, c.n, o.run_at, 0 FROM c LEFT JOIN LATERAL (
	WITH RECURSIVE p AS (
		(SELECT priority, run_at FROM backstop_tasks t
			WHERE c.state = 'pending' AND t.state = 'pending' AND t.queue = c.queue
			ORDER BY priority DESC, run_at LIMIT 1)
		UNION ALL
		SELECT n.priority, n.run_at FROM p CROSS JOIN LATERAL (
			SELECT priority, run_at FROM backstop_tasks t
			WHERE t.state = 'pending' AND t.queue = c.queue AND t.priority < p.priority
			ORDER BY priority DESC, run_at LIMIT 1) n)
	SELECT min(run_at) AS run_at FROM p) o ON true
ORDER BY 1, 2, 3`

// CountByQueue implements store.APIStore from the kept counts (sqlCounts):
// every state exact, the finished ones included.
func (s *Store) CountByQueue(ctx context.Context) ([]store.QueueCounts, error) {
	rows, err := s.pool.Query(ctx, sqlCounts)
	if err != nil {
		return nil, fmt.Errorf("pgstore: count by queue: %w", err)
	}
	return sqldialect.ScanQueueCounts("pgstore", rows)
}

// sqlFoldCounts moves the committed deltas into the kept counts (the
// deltas a writer commits meanwhile stay for the next fold), in key order
// so two folds never wait on each other in a cycle; sqlDropZeroCounts
// drops the groups that emptied.
const (
	sqlFoldCounts = `WITH d AS (DELETE FROM backstop_task_count_deltas RETURNING queue, state, dlq_status, n),
	s AS (SELECT queue, state, dlq_status, sum(n) AS n FROM d GROUP BY 1, 2, 3)
INSERT INTO backstop_task_counts AS c (queue, state, dlq_status, n)
SELECT queue, state, dlq_status, n FROM s ORDER BY 1, 2, 3
ON CONFLICT (queue, state, dlq_status) DO UPDATE SET n = c.n + excluded.n`
	sqlDropZeroCounts = `DELETE FROM backstop_task_counts WHERE n = 0`

	// The dead letters' groups (migration 00062), likewise.
	sqlFoldGroupCounts = `WITH d AS (DELETE FROM backstop_dlq_group_count_deltas RETURNING dlq_status, queue, dlq_group, dead_reason, last_error, n),
	s AS (SELECT dlq_status, queue, dlq_group, dead_reason, last_error, sum(n) AS n FROM d GROUP BY 1, 2, 3, 4, 5)
INSERT INTO backstop_dlq_group_counts AS c (dlq_status, queue, dlq_group, dead_reason, last_error, n)
SELECT dlq_status, queue, dlq_group, dead_reason, last_error, n FROM s ORDER BY 1, 2, 3
ON CONFLICT (dlq_status, queue, dlq_group) DO UPDATE SET n = c.n + excluded.n`
	sqlDropZeroGroupCounts = `DELETE FROM backstop_dlq_group_counts WHERE n = 0`
)

// FoldCounts implements store.CountKeeper: one transaction.
func (s *Store) FoldCounts(ctx context.Context) (int, error) {
	var folded int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, sqlFoldCounts)
		if err != nil {
			return err
		}
		folded = tag.RowsAffected()
		if folded > 0 {
			if _, err = tx.Exec(ctx, sqlDropZeroCounts); err != nil {
				return err
			}
		}
		if tag, err = tx.Exec(ctx, sqlFoldGroupCounts); err != nil {
			return err
		}
		if tag.RowsAffected() > 0 {
			folded += tag.RowsAffected()
			_, err = tx.Exec(ctx, sqlDropZeroGroupCounts)
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("pgstore: fold counts: %w", err)
	}
	return int(folded), nil
}

// sqlReconcileCounts compares the tasks counted by group with the kept
// counts plus the deltas, all read in the statement's one snapshot (a
// task's change and its delta commit together, so they agree unless
// something wrote tasks past the triggers), and appends the difference
// as deltas: concurrent writers' later deltas add to it unchanged.
const sqlReconcileCounts = `INSERT INTO backstop_task_count_deltas (queue, state, dlq_status, n)
SELECT queue, state, dlq_status, sum(n) FROM (
	SELECT queue, state, COALESCE(dlq_status, '') AS dlq_status, count(*) AS n FROM backstop_tasks GROUP BY 1, 2, 3
	UNION ALL
	SELECT queue, state, dlq_status, -n FROM backstop_task_counts
	UNION ALL
	SELECT queue, state, dlq_status, -n FROM backstop_task_count_deltas) d
GROUP BY 1, 2, 3 HAVING sum(n) <> 0
RETURNING abs(n)`

// sqlReconcileGroupCounts does the same for the dead letters' groups
// (one grouped read of the dead letters with a fingerprint; a group's
// reason and error are a function of its fingerprint).
const sqlReconcileGroupCounts = `INSERT INTO backstop_dlq_group_count_deltas (dlq_status, queue, dlq_group, dead_reason, last_error, n)
SELECT dlq_status, queue, dlq_group, dead_reason, last_error, sum(n) FROM (
	SELECT COALESCE(dlq_status, '') AS dlq_status, queue, dlq_group, dead_reason, left(last_error, 200) AS last_error, count(*) AS n
		FROM backstop_tasks WHERE state = 'dead' AND dlq_group IS NOT NULL GROUP BY 1, 2, 3, 4, 5
	UNION ALL
	SELECT dlq_status, queue, dlq_group, dead_reason, last_error, -n FROM backstop_dlq_group_counts
	UNION ALL
	SELECT dlq_status, queue, dlq_group, dead_reason, last_error, -n FROM backstop_dlq_group_count_deltas) d
GROUP BY 1, 2, 3, 4, 5 HAVING sum(n) <> 0
RETURNING abs(n)`

// ReconcileCounts implements store.CountKeeper: two statements (the task
// counts, the dead letters' groups), each one grouped scan.
func (s *Store) ReconcileCounts(ctx context.Context) (store.CountDrift, error) {
	var d store.CountDrift
	for _, q := range []string{sqlReconcileCounts, sqlReconcileGroupCounts} {
		if err := s.reconcile(ctx, q, &d); err != nil {
			return store.CountDrift{}, fmt.Errorf("pgstore: reconcile counts: %w", err)
		}
	}
	return d, nil
}

func (s *Store) reconcile(ctx context.Context, q string, d *store.CountDrift) error {
	rows, err := s.pool.Query(ctx, q)
	if err != nil {
		return err
	}
	for rows.Next() {
		var n int64
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		d.Groups++
		d.Tasks += int(n)
	}
	rows.Close()
	return rows.Err()
}
