package pgstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Claim implements store.Store in one statement: FOR UPDATE SKIP LOCKED
// lets any number of claimers share a queue without waiting on each other.
// Spilled payloads come back whole.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) ([]*bt.Task, error) {
	if p.Max <= 0 {
		return nil, nil
	}
	if p.Fair && !s.procedures.FairOneValue(ctx, p) {
		return s.claimFair(ctx, p) // fair.go: within the limits with p.Limited
	}
	if p.Limited {
		return s.claimLimited(ctx, p) // limits.go
	}
	// Each statement commits on its own: when the pick from the head
	// fails after the cursor pick claimed tasks, those are returned (they
	// are leased) and the next claim meets the error.
	tasks, note, err := s.pickClaim(ctx, s.pool, p)
	if err != nil && len(tasks) == 0 {
		return nil, fmt.Errorf("pgstore: claim %s: %w", p.Queue, err)
	}
	note.record()
	sortClaimed(tasks)
	return tasks, nil
}

// sortClaimed puts claimed tasks in claim order (RETURNING has none).
func sortClaimed(tasks []*bt.Task) {
	slices.SortFunc(tasks, func(a, b *bt.Task) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), a.RunAt.Compare(b.RunAt), cmp.Compare(a.ID, b.ID))
	})
}

// Heartbeat implements store.Store in one statement.
func (s *Store) Heartbeat(ctx context.Context, beats []store.Beat, now, leaseUntil time.Time) ([]store.BeatResult, error) {
	if len(beats) == 0 {
		return nil, nil
	}
	// Send rows in id order, as Settle does, so that concurrent batches
	// lock shared rows in the same order instead of deadlocking.
	order := sortedBy(len(beats), func(i int) string { return beats[i].TaskID })
	var (
		ids, execs       = make([]string, len(beats)), make([]string, len(beats))
		hasProgress      = make([]bool, len(beats))
		total, completed = make([]int32, len(beats)), make([]int32, len(beats))
	)
	for j, i := range order {
		b := beats[i]
		ids[j], execs[j] = b.TaskID, b.ExecutionID
		if b.Progress != nil {
			hasProgress[j] = true
			total[j], completed[j] = int32(b.Progress.Total), int32(b.Progress.Completed)
		}
	}
	// A single beat is prepared and cached on the connection, run from its
	// generic plan, which finds the task by the primary key (batchOfOne); a
	// batch is planned for its size (perBatchPlan, heartbeatSQL).
	q, mode := sqlHeartbeatSkip, perBatchPlan
	if len(beats) == 1 {
		q, mode = sqlHeartbeat, pgx.QueryExecModeCacheStatement
	}
	rs, err := s.pool.Query(ctx, q, mode, textArray(ids), textArray(execs), hasProgress, total, completed, leaseUntil, now,
		store.ActorFrom(ctx, ""))
	if err != nil {
		return nil, fmt.Errorf("pgstore: heartbeat: %w", err)
	}
	out := make([]store.BeatResult, len(beats))
	for i, b := range beats {
		out[i] = store.BeatResult{TaskID: b.TaskID, Lost: true}
	}
	var (
		idx    int64
		cancel bool
	)
	_, err = pgx.ForEachRow(rs, []any{&idx, &cancel}, func() error {
		i := order[idx-1]
		out[i].Lost, out[i].CancelRequested = false, cancel
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: heartbeat: %w", err)
	}
	return out, nil
}

// Settle implements store.Store in one statement (hence one transaction):
// it updates the tasks whose lease is still the one named, records their
// executions, and wakes the queues of tasks that became pending.
func (s *Store) Settle(ctx context.Context, settlements []store.Settlement) ([]bool, error) {
	return s.settle(ctx, s.pool, settlements)
}

// The settles and the single heartbeat are run as pgx's default mode runs
// a statement: prepared and cached on the connection, planned for the
// arguments of its first five executions and then, when no dearer, from
// the generic plan, made once and kept until the table is invalidated (a
// vacuum, an analyze). That plan is costed without the arrays, from the
// table's size when it is made. Each statement is written so that its
// generic plan finds every row of its batch by the primary key (batchOfOne)
// and checks the lease on the row found: no planning a call, which cost as
// much as the execution, and no scan of a table that grows after the plan
// was made, but for one window: a plan made on a vacuumed table of 4 pages
// or fewer scans it until the next analyze (docs/benchmarks.md, "The
// success settle's generic plan").

// perBatchPlan, as a statement's first argument, runs it as an unnamed
// statement (one round trip once its description is cached), which the
// server plans for the arguments of each execution: the heartbeat of a
// batch (heartbeatSQL).
const perBatchPlan = pgx.QueryExecModeCacheDescribe

// querier runs a statement on the pool (its own transaction) or inside a
// transaction (Txs.Settle): the same statement either way.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// settle is Settle's body on q.
func (s *Store) settle(ctx context.Context, q querier, settlements []store.Settlement) ([]bool, error) {
	settlements = store.CleanSettlements(settlements) // store/text.go: an error text is never lost for its bytes
	n := len(settlements)
	if n == 0 {
		return nil, nil
	}
	order := sortedBy(n, func(i int) string { return settlements[i].TaskID })
	if allSucceeded(settlements) {
		return settleSucceeded(ctx, q, s.hot(sqlSettleSucceeded), settlements, order)
	}
	var (
		ids, execs, outcomes   = make([]string, n), make([]string, n), make([]string, n)
		errs, details          = make([]string, n), make([]string, n)
		finished, runAt        = make([]time.Time, n), make([]time.Time, n)
		states, reasons        = make([]string, n), make([]string, n)
		uncharged, hasProgress = make([]bool, n), make([]bool, n)
		total, completed       = make([]int32, n), make([]int32, n)
	)
	for j, i := range order {
		st := settlements[i]
		ids[j], execs[j], outcomes[j] = st.TaskID, st.ExecutionID, string(st.Outcome)
		errs[j], details[j] = st.Error, st.ErrorDetail
		finished[j], runAt[j] = st.FinishedAt, st.RunAt
		states[j], reasons[j] = string(st.State), string(st.DeadReason)
		uncharged[j] = st.Uncharged
		if st.Progress != nil {
			hasProgress[j] = true
			total[j], completed[j] = int32(st.Progress.Total), int32(st.Progress.Completed)
		}
	}
	rs, err := q.Query(ctx, sqlSettle, textArray(ids), textArray(execs), textArray(outcomes), textArray(errs),
		textArray(details), timeArray(finished), textArray(states), timeArray(runAt), textArray(reasons),
		uncharged, hasProgress, total, completed, store.ActorFrom(ctx, ""))
	if err != nil {
		return nil, fmt.Errorf("pgstore: settle: %w", err)
	}
	applied := make([]bool, n)
	var idx int64
	_, err = pgx.ForEachRow(rs, []any{&idx}, func() error {
		if idx > 0 { // 0: a queue notification
			applied[order[idx-1]] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: settle: %w", err)
	}
	return applied, nil
}

// allSucceeded reports a batch that only records successes of current
// leases, which settleSucceeded applies with a leaner statement.
func allSucceeded(settlements []store.Settlement) bool {
	for _, st := range settlements {
		if st.State != bt.StateSucceeded || st.Outcome != bt.OutcomeSucceeded || st.ExecutionID == "" ||
			st.Error != "" || st.ErrorDetail != "" || st.Uncharged {
			return false
		}
	}
	return true
}

func settleSucceeded(ctx context.Context, q querier, sql string, settlements []store.Settlement, order []int) ([]bool, error) {
	n := len(settlements)
	var (
		ids, execs       = make([]string, n), make([]string, n)
		finished         = make([]time.Time, n)
		hasProgress      = make([]bool, n)
		total, completed = make([]int32, n), make([]int32, n)
	)
	for j, i := range order {
		st := settlements[i]
		ids[j], execs[j], finished[j] = st.TaskID, st.ExecutionID, st.FinishedAt
		if st.Progress != nil {
			hasProgress[j] = true
			total[j], completed[j] = int32(st.Progress.Total), int32(st.Progress.Completed)
		}
	}
	// Prepared and cached on the connection: run from its generic plan,
	// which finds each task by the primary key (batchOfOne).
	rs, err := q.Query(ctx, sql, textArray(ids), textArray(execs), timeArray(finished), hasProgress, total, completed,
		store.ActorFrom(ctx, ""))
	if err != nil {
		return nil, fmt.Errorf("pgstore: settle: %w", err)
	}
	applied := make([]bool, n)
	var idx int64
	_, err = pgx.ForEachRow(rs, []any{&idx}, func() error {
		applied[order[idx-1]] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: settle: %w", err)
	}
	return applied, nil
}

// sortedBy returns the indexes 0..n-1 ordered by key.
func sortedBy(n int, key func(int) string) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(key(a), key(b)) })
	return order
}

// queryTasks reads whole tasks through the pool.
func (s *Store) queryTasks(ctx context.Context, sql string, args ...any) ([]*bt.Task, error) {
	return queryTasksOn(ctx, s.pool, sql, args...)
}

// queryTasksOn reads whole tasks through q (the pool or a transaction).
func queryTasksOn(ctx context.Context, q querier, sql string, args ...any) ([]*bt.Task, error) {
	rs, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var tasks []*bt.Task
	for rs.Next() {
		t, err := scanTask(rs)
		if err != nil {
			return nil, err
		}
		tasks = append(tasks, t)
	}
	return tasks, rs.Err()
}

// Features implements store.Store: concurrent writers, and two settle
// batches at once, since batches of disjoint tasks run side by side
// without waiting on each other's locks.
func (s *Store) Features() store.Features {
	return store.Features{ConcurrentWriters: true, SettleParallelism: 2, ClaimParallelism: 2}
}
