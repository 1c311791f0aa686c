package pgstore

import (
	"context"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/store"
)

// TaskEventRows exposes taskEventRows to the external tests (plans).
var TaskEventRows = taskEventRows

// ExplainList is the plan of the query List runs for f, with the given
// settings (SET LOCAL name = value) in its transaction; when the kept
// counts hold none of f's states (List then runs no statement), the plan
// of the walk by id it runs when they hold many.
func (s *Store) ExplainList(ctx context.Context, f store.ListFilter, settings map[string]string) (string, error) {
	sql, args, err := s.listStatement(ctx, s.pool, f)
	if err != nil {
		return "", err
	}
	if sql == "" {
		if sql, args, err = s.walkStatement(f); err != nil {
			return "", err
		}
	}
	return s.explain(ctx, settings, sql, args...)
}

// walkStatement is List's statement for f in the walk by id.
func (s *Store) walkStatement(f store.ListFilter) (string, []any, error) {
	where, args, err := listWhere(f)
	if err != nil {
		return "", nil, err
	}
	args = append(args, 100)
	return listQuery(f, where, len(args), listWalk), args, nil
}

// ExplainAnalyzeList runs the query List runs for f under EXPLAIN
// (ANALYZE, BUFFERS) and returns the plan, or "" when List answers from
// the kept counts without a statement. walk forces the walk by id (the
// form List always ran before it read the counts).
func (s *Store) ExplainAnalyzeList(ctx context.Context, f store.ListFilter, walk bool) (string, error) {
	sql, args, err := s.listStatement(ctx, s.pool, f)
	if walk {
		sql, args, err = s.walkStatement(f)
	}
	if err != nil || sql == "" {
		return "", err
	}
	rs, err := s.pool.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+sql, args...)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rs, pgx.RowTo[string])
	return strings.Join(lines, "\n"), err
}

// WhereArms exposes whereArms (the states of each arm of a where over
// every state).
var WhereArms = whereArms

// MigrateTo applies the migrations up to version (none past it).
func (s *Store) MigrateTo(ctx context.Context, version int64) error {
	p, closeProvider, err := s.provider(ctx)
	if err != nil {
		return err
	}
	defer closeProvider()
	applied, err := p.UpTo(ctx, version)
	s.schemaAt.Store(version)
	s.afterMigrations(len(applied))
	return err
}

// MigrateDownTo rolls the migrations back to version.
func (s *Store) MigrateDownTo(ctx context.Context, version int64) error {
	p, closeProvider, err := s.provider(ctx)
	if err != nil {
		return err
	}
	defer closeProvider()
	applied, err := p.DownTo(ctx, version)
	s.schemaAt.Store(version)
	s.afterMigrations(len(applied))
	return err
}

// ExplainAudit is the plan of an audit stream read from the log's start,
// with the given settings (SET LOCAL name = value).
func (s *Store) ExplainAudit(ctx context.Context, settings map[string]string) (string, error) {
	return s.explain(ctx, settings, sqlReadAudit, "0", int64(0), int64(0), store.AuditTypes, 100, "18446744073709551615")
}

// ExplainWorkerExecutions is the plan of a worker's newest executions
// (WorkerExecutions' query), sequential scans off.
func (s *Store) ExplainWorkerExecutions(ctx context.Context, worker string, limit int) (string, error) {
	return s.explain(ctx, indexesOnly, sqlWorkerExecutions, worker, limit, "", nil, "")
}

// SetFinishedCounted lowers how many finished tasks s's gauges count
// (FinishedCounted), for a test of the cap.
func (s *Store) SetFinishedCounted(n int) { s.finishedCounted = n }

// ExplainCounts is the plan of CountByQueue's query, as the planner picks
// it.
func (s *Store) ExplainCounts(ctx context.Context) (string, error) {
	return s.explain(ctx, nil, sqlCounts)
}

// ExplainRedriveBatch runs RedriveBatch's one-statement fast path for b
// under EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) in a transaction it
// rolls back, and returns the plan.
func (s *Store) ExplainRedriveBatch(ctx context.Context, b store.RedriveBatch) (string, error) {
	sql, args := redriveFast(b, s.redrivesCounted())
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // undone on purpose
	var plan string
	err = tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) "+sql, args...).Scan(&plan)
	return plan, err
}

// ExplainDLQGroups is the plan of the query DLQGroups runs for f, with the
// given settings (SET LOCAL name = value) in its transaction.
func (s *Store) ExplainDLQGroups(ctx context.Context, f store.ListFilter, settings map[string]string) (string, error) {
	q, args, err := dlqGroupsQuery(f)
	if err != nil {
		return "", err
	}
	return s.explain(ctx, settings, q, args...)
}

// indexesOnly are the settings of a plan read from indexes alone.
var indexesOnly = map[string]string{"enable_seqscan": "off", "enable_bitmapscan": "off"}

// explain is the plan of query with args, each of settings set (as SET
// LOCAL) in the read-only transaction it runs in.
func (s *Store) explain(ctx context.Context, settings map[string]string, query string, args ...any) (string, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	for k, v := range settings {
		if _, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", k, v); err != nil {
			return "", err
		}
	}
	rs, err := tx.Query(ctx, "EXPLAIN "+query, args...)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rs, pgx.RowTo[string])
	return strings.Join(lines, "\n"), err
}

// ExplainExpiredLeases is the plan of the lease-expiry sweep at now, with
// the given settings (SET LOCAL name = value).
func (s *Store) ExplainExpiredLeases(ctx context.Context, now time.Time, settings map[string]string) (string, error) {
	return s.explain(ctx, settings, sqlExpiredLeases, now, 100)
}

// ExplainRetentionPickGeneric is the generic plan of retention's pick,
// the plan a prepared statement may settle on after five executions
// (sequential scans disabled, so any index it can read shows).
func (s *Store) ExplainRetentionPickGeneric(ctx context.Context) (string, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	if _, err := tx.Exec(ctx, `SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
		set_config('enable_seqscan', 'off', true)`); err != nil {
		return "", err
	}
	if _, err := tx.Exec(ctx, "PREPARE backstop_retention_pick AS "+sqlDoomedFinished); err != nil {
		return "", err
	}
	defer conn.Exec(context.WithoutCancel(ctx), "DEALLOCATE backstop_retention_pick") //nolint:errcheck // best effort
	rs, err := tx.Query(ctx, "EXPLAIN EXECUTE backstop_retention_pick('succeeded', now(), 1000)")
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rs, pgx.RowTo[string])
	return strings.Join(lines, "\n"), err
}

// GaugesByScan is the gauges as the shared procedures read them (one
// grouped scan of every task), to compare with Gauges' index reads.
func (s *Store) GaugesByScan(ctx context.Context) (*store.GaugeSnapshot, error) {
	return s.procedures.Gauges(ctx)
}

// ExplainGauges is the plan of Gauges' query with sequential and bitmap
// scans off: the indexes the planner can answer it from alone.
func (s *Store) ExplainGauges(ctx context.Context) (string, error) {
	return s.explain(ctx, indexesOnly, sqlGauges, s.finishedCounted)
}

// ErrorLike exposes errorLike (the error filter's LIKE pattern).
var ErrorLike = errorLike

// ExplainListWithout is ExplainList's plan, sequential scans off, with the
// given indexes dropped in its transaction (rolled back): what the planner does when those are
// not there to compete, on a table too small to prefer the index tested.
func (s *Store) ExplainListWithout(ctx context.Context, f store.ListFilter, drop []string) (string, error) {
	where, args, err := listWhere(f)
	if err != nil {
		return "", err
	}
	args = append(args, 50)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // undone on purpose
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
		return "", err
	}
	for _, ix := range drop {
		if _, err := tx.Exec(ctx, "DROP INDEX "+pgx.Identifier{ix}.Sanitize()); err != nil {
			return "", err
		}
	}
	rs, err := tx.Query(ctx, "EXPLAIN "+listQuery(f, where, len(args), listWalk), args...)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rs, pgx.RowTo[string])
	return strings.Join(lines, "\n"), err
}

// ExpireClaimCursors makes every claim cursor's period run out: the next
// claim of each queue picks from the head of the claim index.
func (s *Store) ExpireClaimCursors() {
	s.cursors.Range(func(_, v any) bool {
		c := v.(*claimCursor)
		c.mu.Lock()
		c.fullAt, c.fullTook = time.Time{}, 0
		c.mu.Unlock()
		return true
	})
}

// MigrationBefore is the version of the newest migration older than v.
func MigrationBefore(v int64) int64 {
	names, _ := fs.Glob(migrationFiles, "migrations/*.sql")
	var before int64
	for _, n := range names {
		num, _, _ := strings.Cut(path.Base(n), "_")
		if x, err := strconv.ParseInt(num, 10, 64); err == nil && x < v {
			before = max(before, x)
		}
	}
	return before
}

// SQLSettleSucceeded is the success settle's statement (plans).
var SQLSettleSucceeded = sqlSettleSucceeded

// SQLLockRuns, SQLLockedSteps and SQLUpdateRuns are a step settle's run
// statements: LockRuns' two and UpdateRuns' (plans).
var SQLLockRuns, SQLLockedSteps, SQLUpdateRuns = sqlLockRuns, sqlLockedSteps, sqlUpdateRuns

// SQLSettle is the general settle's statement (plans).
var SQLSettle = sqlSettle

// SQLHeartbeat and SQLHeartbeatSkip are the heartbeat's statements, of one
// beat and of a batch (plans).
var SQLHeartbeat, SQLHeartbeatSkip = sqlHeartbeat, sqlHeartbeatSkip

// SetClaimPlanPeriod sets how long a connection keeps its claim
// statements before it prepares them again (claimPlanPeriod).
func (s *Store) SetClaimPlanPeriod(d time.Duration) { s.claimPlanPeriod = d }
