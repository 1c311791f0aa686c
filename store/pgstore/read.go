package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/filter"
	"github.com/backstophq/backstop/store"
)

// defaultListLimit applies when ListFilter.Limit is not set.
const defaultListLimit = 100

// Get implements store.Store: the task, its full payload and its executions.
func (s *Store) Get(ctx context.Context, id string) (*bt.Task, error) {
	tasks, err := s.queryTasks(ctx, sqlGetTask, id)
	if err != nil {
		return nil, fmt.Errorf("pgstore: get %s: %w", id, err)
	}
	if len(tasks) == 0 {
		return nil, notFound(id)
	}
	t := tasks[0]
	if t.Executions, err = s.Executions(ctx, id); err != nil {
		return nil, err
	}
	return t, nil
}

// List implements store.Store.
func (s *Store) List(ctx context.Context, f store.ListFilter) ([]*bt.Task, error) {
	if f.Where != "" {
		x, err := filter.Compile(f.Where)
		if err != nil {
			return nil, fmt.Errorf("pgstore: list: where: %w", err)
		}
		if !x.InSQL() {
			return filter.Scan(ctx, x, f, s.List)
		}
	}
	var tasks []*bt.Task
	read := func(q querier) error {
		sql, args, err := s.listStatement(ctx, q, f)
		if err != nil || sql == "" {
			return err
		}
		tasks, err = queryTasksOn(ctx, q, sql, args...)
		return err
	}
	var err error
	if s.listCounted(f) {
		// One snapshot: the kept counts and the page agree.
		err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
			func(tx pgx.Tx) error { return read(tx) })
	} else {
		err = read(s.pool)
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: list: %w", err)
	}
	return tasks, nil
}

// listStatement is List's statement for f and its arguments, read on q:
// "" when the kept counts hold none of f's states (listForm), whose
// states are otherwise narrowed to those that hold tasks.
func (s *Store) listStatement(ctx context.Context, q querier, f store.ListFilter) (string, []any, error) {
	form := listWalk
	if s.listCounted(f) {
		var (
			held []bt.State
			err  error
		)
		if form, held, err = listFormOn(ctx, q, f); err != nil || form == listEmpty {
			return "", nil, err
		}
		f.States = held
	}
	where, args, err := listWhere(f)
	if err != nil {
		return "", nil, err
	}
	if f.AfterID != "" {
		args = append(args, f.AfterID)
		where = append(where, "t.id "+store.CursorOp(f.Newest)+" $"+strconv.Itoa(len(args)))
	}
	limit := f.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	args = append(args, limit)
	return listQuery(f, where, len(args), form), args, nil
}

// runAttribute is the attribute that names a task's run (the library's
// RunAttribute), which the index of migrations 00050 and 00058 holds.
const runAttribute = "run_id"

// listWhere turns a filter (but its cursor and limit) into conditions on
// backstop_tasks t and their arguments ($1…).
func listWhere(f store.ListFilter) ([]string, []any, error) {
	var (
		where []string
		args  []any
	)
	add := func(cond string, arg any) {
		args = append(args, arg)
		where = append(where, fmt.Sprintf(cond, "$"+strconv.Itoa(len(args))))
	}
	if f.Queue != "" {
		add("t.queue = %s", f.Queue)
	}
	if f.Kind != "" {
		add("t.kind = %s", f.Kind)
	}
	// Known states as constants, so that the planner proves the predicate
	// of the state's partial index (the payload index, the claim index…)
	// in every plan, generic ones included.
	known, indexed := len(f.States) > 0, len(f.States) > 0
	for _, st := range f.States {
		known = known && slices.Contains(bt.States, st)
		indexed = indexed && slices.Contains(payloadIndexStates, st)
	}
	if known {
		where = append(where, "t.state IN ("+stateList(f.States)+")")
	} else if len(f.States) > 0 {
		states := make([]string, len(f.States))
		for i, st := range f.States {
			states[i] = string(st)
		}
		add("t.state = ANY(%s::text[])", states)
	}
	if f.Reason != "" {
		add("t.dead_reason = %s", string(f.Reason))
	}
	attrs := f.Attrs
	if run, ok := f.Attrs[runAttribute]; ok {
		// A run's tasks, in two parts split by the id alone: those whose
		// id does not start with the run id and a dot, through the index
		// of run_id attributes (migrations 00050, 00058), whose predicate
		// the first part's conditions prove; and those whose id does (a
		// workflow's step tasks, which the index leaves out where ids sort
		// byte by byte), through the primary key's range of the prefix,
		// which starts_with gives the planner under that collation. The
		// equality is the containment's answer (attribute values are
		// strings), and the index's statistics estimate it where a
		// containment's default selectivity would make the planner walk
		// the primary key.
		args = append(args, run, run+".")
		r, prefix := "$"+strconv.Itoa(len(args)-1), "$"+strconv.Itoa(len(args))
		has := "t.attributes ? '" + runAttribute + "' AND t.attributes->>'" + runAttribute + "' = " + r
		where = append(where, "(("+has+" AND NOT starts_with(t.id, (t.attributes->>'"+runAttribute+"') || '.')) OR ("+
			has+" AND starts_with(t.id, "+prefix+")))")
		attrs = maps.Clone(f.Attrs)
		delete(attrs, runAttribute)
	}
	if len(attrs) > 0 {
		b, err := json.Marshal(attrs)
		if err != nil {
			return nil, nil, fmt.Errorf("attributes: %w", err)
		}
		add("t.attributes @> %s::jsonb", string(b))
	}
	if len(f.DLQStatuses) > 0 {
		sts := make([]string, len(f.DLQStatuses))
		for i, st := range f.DLQStatuses {
			sts[i] = string(st)
		}
		add("t.dlq_status = ANY(%s::text[])", sts)
	}
	if f.ErrorContains != "" {
		add("t.last_error LIKE %s", errorLike(f.ErrorContains))
	}
	if !f.Since.IsZero() {
		add("t.last_seen >= %s", f.Since)
	}
	if !f.Until.IsZero() {
		add("t.last_seen <= %s", f.Until)
	}
	if f.IdempotencyKey != "" {
		add("t.idempotency_key = %s", f.IdempotencyKey)
	}
	if !f.CreatedSince.IsZero() {
		add("t.created_at >= %s", f.CreatedSince)
	}
	if !f.CreatedUntil.IsZero() {
		add("t.created_at <= %s", f.CreatedUntil)
	}
	if f.Where != "" {
		var cond string
		var err error
		if len(f.States) == 0 {
			cond, err = whereAnyState(f.Where, &args)
		} else {
			cond, err = whereCond(f.Where, &args, indexed)
		}
		if err != nil {
			return nil, nil, err
		}
		where = append(where, cond)
	}
	return where, args, nil
}

// errorLike is the LIKE pattern of the last errors that contain s (the
// error filter, error_contains): s with LIKE's wildcards and its escape
// character escaped, between two %. A LIKE answers what strpos answered,
// and a LIKE is what the trigram index of the dead letters' errors serves
// (migration 00055, where the server has pg_trgm): a filter of dead
// letters by an error text of three characters or more reads the index's
// entries for the text's trigrams, then checks the rows they name; a
// shorter text has no trigram to look up, and tasks of other states are
// not in the index, so those read the rows.
func errorLike(s string) string {
	return "%" + strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`).Replace(s) + "%"
}

// payloadIndexStates are the states whose tasks the payload index holds
// (migration 00038): where a task waits, and the dead letters.
var payloadIndexStates = []bt.State{bt.StatePending, bt.StateScheduled, bt.StateBuffered, bt.StateDead}

// whereArms split a where over tasks of every state by the indexes that
// hold each state's tasks: the payload index (payloadIndexStates), the
// running tasks' index (migration 00031) and the finished tasks' index
// (succeeded and canceled). Every state is in exactly one arm
// (TestWhereArmsCoverStates), so the planner can answer a where the payload
// index takes with a bitmap of the three, reading only the matching
// waiting and dead tasks and the running, succeeded and canceled ones.
var whereArms = [][]bt.State{payloadIndexStates, {bt.StateRunning}, {bt.StateSucceeded, bt.StateCanceled}}

// whereAnyState is the where's condition on tasks of any state: one arm
// per whereArms, the first with the payload index's containment, when the
// where has one; else the plain condition.
func whereAnyState(w string, args *[]any) (string, error) {
	x, err := filter.Compile(w)
	if err != nil {
		return "", fmt.Errorf("where: %w", err)
	}
	plain, err := whereCond(w, args, false)
	if err != nil || !x.PayloadIndexed() {
		return plain, err
	}
	withIndex, err := whereCond(w, args, true)
	if err != nil {
		return "", err
	}
	arms := make([]string, len(whereArms))
	for i, states := range whereArms {
		cond := plain
		if i == 0 {
			cond = withIndex
		}
		arms[i] = "(t.state IN (" + stateList(states) + ") AND " + cond + ")"
	}
	return "(" + strings.Join(arms, " OR ") + ")", nil
}

// stateList is states as SQL literals (the fixed lower-case names of
// bt.States), for predicates the planner must see as constants.
func stateList(states []bt.State) string {
	lits := make([]string, len(states))
	for i, st := range states {
		if !slices.Contains(bt.States, st) {
			panic("pgstore: not a state: " + string(st))
		}
		lits[i] = "'" + string(st) + "'"
	}
	return strings.Join(lits, ", ")
}

// whereDocs are the JSON documents a where condition reads: the payload,
// inline or spilled, and the attributes.
var whereDocs = filter.Docs{
	Payload:     `COALESCE(t.payload, (SELECT convert_from(p.data, 'UTF8')::json FROM backstop_payloads p WHERE p.task_id = t.id))`,
	Attrs:       `t.attributes`,
	PayloadJSON: true, // json operators on the stored text: no conversion to jsonb per row
	// Postgres's json operators fail on a \u0000 escape anywhere they
	// parse: such a payload (its raw text, unparsed) matches no where that
	// reads the payload (docs/api.md).
	Unreadable: `strpos(COALESCE(t.payload::text, (SELECT convert_from(p.data, 'UTF8') FROM backstop_payloads p WHERE p.task_id = t.id)), '\u0000') > 0`,
}

// payloadIndex is the GIN index of the payloads of waiting tasks and dead
// letters (migrations 00026, 00038), which equality and in on payload
// fields read.
const payloadIndex, payloadIndexOther = `backstop_payload_index(t.payload)`, `{"":1e400}`

// payloadIndexHolds is the index's predicate beyond the state (migration
// 00068): it leaves out the payloads that are {}, which no containment of
// a where can select (filter.Docs.PayloadIndexHolds). Written as the
// index's predicate is, so that the planner proves it; on an older schema
// it selects nothing the containment beside it would not.
const payloadIndexHolds = `(t.payload IS NULL OR t.payload::text <> '{}')`

// whereCond is a where expression's SQL condition on backstop_tasks t
// (internal/filter), its parameters appended to args. indexed: the query
// selects tasks the payload index holds only (payloadIndexStates, as
// constants); elsewhere a containment would cost each row the index's
// expression for nothing.
func whereCond(w string, args *[]any, indexed bool) (string, error) {
	x, err := filter.Compile(w)
	if err != nil {
		return "", fmt.Errorf("where: %w", err)
	}
	docs := whereDocs
	if indexed {
		docs.PayloadIndex, docs.PayloadIndexOther, docs.PayloadIndexHolds = payloadIndex, payloadIndexOther, payloadIndexHolds
	}
	cond, ok := x.SQL(filter.Postgres, docs, func(v any) string {
		*args = append(*args, v)
		return "$" + strconv.Itoa(len(*args))
	})
	if !ok {
		return "", filter.ErrNotInSQL
	}
	return cond, nil
}

// FinishedCounted is how many finished tasks the gauges count
// (GaugeReader): the newest ones. Past it, the succeeded and canceled
// gauges are lower bounds (store.GaugeSnapshot.Capped).
const FinishedCounted = 10_000

// DLQGroups implements store.APIStore: both counts in one grouping of the
// filter's dead letters by (reason, error: its first 200 characters),
// rolled up in Go, the error groups cut in Go. (One grouping is about
// twice as fast as GROUPING SETS of the two, which hash every row twice;
// a NULL reason or error and an empty one stay apart, as they were there.)
// A filter of dead-letter statuses and a queue only (the Dead letters
// page) reads the kept counts of the pair's fingerprint, dlq_group
// (sqlDLQGroupsKept: a few rows per group, whatever the number of dead
// letters); any other filter groups the rows.
func (s *Store) DLQGroups(ctx context.Context, f store.ListFilter, errorLimit int) (*store.DLQGroups, error) {
	q, args, err := dlqGroupsQuery(f)
	if err != nil {
		return nil, fmt.Errorf("pgstore: dead-letter groups: %w", err)
	}
	rs, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("pgstore: dead-letter groups: %w", err)
	}
	defer rs.Close()
	type key struct {
		null  bool
		value string
	}
	byReason, byError := map[key]int{}, map[key]int{}
	g := &store.DLQGroups{ByReason: []store.GroupCount{}, ByError: []store.GroupCount{}}
	for rs.Next() {
		var (
			reason, errTxt *string
			n              int
		)
		if err := rs.Scan(&reason, &errTxt, &n); err != nil {
			return nil, fmt.Errorf("pgstore: dead-letter groups: %w", err)
		}
		byReason[key{reason == nil, deref(reason)}] += n
		byError[key{errTxt == nil, deref(errTxt)}] += n
		g.Total += n
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: dead-letter groups: %w", err)
	}
	for k, n := range byReason {
		g.ByReason = append(g.ByReason, store.GroupCount{Value: k.value, Count: n})
	}
	for k, n := range byError {
		g.ByError = append(g.ByError, store.GroupCount{Value: k.value, Count: n})
	}
	store.SortGroups(g.ByReason)
	store.SortGroups(g.ByError)
	g.ByError, g.MoreErrors = store.CapGroups(g.ByError, errorLimit)
	return g, nil
}

// dlqGroupsQuery is DLQGroups' statement for f and its arguments:
// columns reason, error (its first 200 characters), count, one row per
// group or per part of one.
func dlqGroupsQuery(f store.ListFilter) (string, []any, error) {
	f.States = []bt.State{bt.StateDead}
	where, args, err := listWhere(f)
	if err != nil {
		return "", nil, err
	}
	cond := strings.Join(where, " AND ")
	q := `SELECT t.dead_reason, left(t.last_error, 200), count(*)
		FROM backstop_tasks t WHERE ` + cond + `
		GROUP BY t.dead_reason, left(t.last_error, 200)`
	if store.GroupsKept(f) {
		// The kept counts' rows of the filter: its statuses (all when
		// none) and its queue (all when none), as parameters after the
		// filter's.
		kept := []string{"true"}
		if len(f.DLQStatuses) > 0 {
			sts := make([]string, len(f.DLQStatuses))
			for i, st := range f.DLQStatuses {
				sts[i] = string(st)
			}
			args = append(args, sts)
			kept = append(kept, fmt.Sprintf("dlq_status = ANY($%d)", len(args)))
		}
		if f.Queue != "" {
			args = append(args, f.Queue)
			kept = append(kept, fmt.Sprintf("queue = $%d", len(args)))
		}
		q = fmt.Sprintf(sqlDLQGroupsKept, cond, strings.Join(kept, " AND "))
	}
	return q, args, nil
}

// sqlDLQGroupsKept (%[1]s: the filter's conditions; %[2]s: the same on
// the kept counts' columns) answers what the grouping of the rows answers,
// from the kept counts of the dead letters by status, queue and
// fingerprint (migrations 00050, 00062) plus their deltas not folded yet,
// in one snapshot: a count per fingerprint with its reason and error,
// without reading the dead letters, and the dead letters without a
// fingerprint (written by a path that does not set one) grouped from
// their rows (an index of those only, empty unless such a path ran). Two
// pairs sharing a 64-bit fingerprint would count as one group: a chance
// of about n²/2^65 for n distinct pairs.
const sqlDLQGroupsKept = `SELECT dead_reason, last_error, sum(n) FROM (
	SELECT dlq_status, queue, dlq_group, dead_reason, last_error, n FROM backstop_dlq_group_counts
	UNION ALL
	SELECT dlq_status, queue, dlq_group, dead_reason, last_error, n FROM backstop_dlq_group_count_deltas) u
WHERE %[2]s GROUP BY dlq_group, dead_reason, last_error HAVING sum(n) > 0
UNION ALL
SELECT t.dead_reason, left(t.last_error, 200), count(*) FROM backstop_tasks t
	WHERE %[1]s AND t.dlq_group IS NULL GROUP BY t.dead_reason, left(t.last_error, 200)`

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Activity implements store.APIStore.
func (s *Store) Activity(ctx context.Context, since, until time.Time) (map[int64]store.MinuteActivity, error) {
	const minute = `floor(extract(epoch FROM %s) / 60)::bigint`
	out := map[int64]store.MinuteActivity{}
	for _, q := range []struct {
		sql string
		add func(a *store.MinuteActivity, n int)
	}{
		{`SELECT ` + fmt.Sprintf(minute, "finalized_at") + `, count(*) FROM backstop_tasks
			WHERE state = 'succeeded' AND finalized_at >= $1 AND finalized_at < $2 GROUP BY 1`,
			func(a *store.MinuteActivity, n int) { a.Succeeded += n }},
		{`SELECT ` + fmt.Sprintf(minute, "finished_at") + `, count(*) FROM backstop_executions
			WHERE outcome IN ('transient_error', 'permanent_error', 'timeout', 'lease_expired') AND finished_at >= $1 AND finished_at < $2 GROUP BY 1`,
			func(a *store.MinuteActivity, n int) { a.Failed += n }},
		{`SELECT ` + fmt.Sprintf(minute, "last_seen") + `, count(*) FROM backstop_tasks WHERE state = 'dead' AND last_seen >= $1 AND last_seen < $2 GROUP BY 1`,
			func(a *store.MinuteActivity, n int) { a.Dead += n }},
	} {
		rs, err := s.pool.Query(ctx, q.sql, since, until)
		if err != nil {
			return nil, fmt.Errorf("pgstore: activity: %w", err)
		}
		for rs.Next() {
			var m int64
			var n int
			if err := rs.Scan(&m, &n); err != nil {
				rs.Close()
				return nil, fmt.Errorf("pgstore: activity: %w", err)
			}
			a := out[m]
			q.add(&a, n)
			out[m] = a
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return nil, fmt.Errorf("pgstore: activity: %w", err)
		}
	}
	return out, nil
}

// Executions implements store.Store: the task's attempts, oldest first.
func (s *Store) Executions(ctx context.Context, taskID string) ([]bt.Execution, error) {
	rs, err := s.pool.Query(ctx, sqlExecutions, taskID)
	if err != nil {
		return nil, fmt.Errorf("pgstore: executions of %s: %w", taskID, err)
	}
	defer rs.Close()
	var out []bt.Execution
	for rs.Next() {
		e, err := scanExecution(rs)
		if err != nil {
			return nil, fmt.Errorf("pgstore: executions of %s: %w", taskID, err)
		}
		out = append(out, e)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: executions of %s: %w", taskID, err)
	}
	return out, nil
}

func notFound(id string) error {
	return fmt.Errorf("pgstore: task %s: %w", id, store.ErrNotFound)
}

// isNoRows reports pgx's "no rows" error.
func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
