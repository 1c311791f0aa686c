package pgstore_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

// Migration 00038 on a database written by the version before it (00035:
// the code reads columns every earlier migration added):
// the payload index then holds its waiting tasks as well as its dead
// letters, the audit stream reads the actor rows' index, a worker's
// newest executions are its index's last entries, and the answers
// are those of the version before (its where and audit reads scanned).
// Rolled back and applied again, it leaves the same answers.
func TestConsoleReadsMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := storeAt(t, 37)
	var tasks []*bt.Task
	for i := range 400 {
		tk := newTask("mig")
		tk.ID = fmt.Sprintf("mig-%04d", i)
		tk.Payload = json.RawMessage(fmt.Sprintf(`{"customer":{"id":%d},"big":123456789012345678}`, i%40))
		if i%80 == 0 {
			tk.Payload = json.RawMessage(fmt.Sprintf(`{"customer":{"id":%d}}`, i%40))
		}
		tasks = append(tasks, tk)
	}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	claim(t, s, "mig", 200, t0)
	killAsBefore(t, s, "'permanent_error'", "'no'")
	for i := range 5 {
		if err := s.AppendEvents(ctx, []bt.Event{store.AuditEvent(t0, store.EventQueuePaused, fmt.Sprintf("q%d", i), "ops", "", nil),
			store.NewEvent(t0, "task.enqueued", fmt.Sprintf("e%d", i), "q", "k", "ops", []byte(`{}`))}); err != nil {
			t.Fatal(err)
		}
	}
	type answers struct{ dead, pending, all, audit, executions []string }
	read := func() answers {
		t.Helper()
		var a answers
		for _, c := range []struct {
			states []bt.State
			into   *[]string
		}{{[]bt.State{bt.StateDead}, &a.dead}, {[]bt.State{bt.StatePending}, &a.pending}, {nil, &a.all}} {
			got, err := s.List(ctx, store.ListFilter{Where: `payload.customer.id == 7`, States: c.states, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			*c.into = ids(got)
		}
		audit, _ := store.ParseStream("audit")
		p, err := s.ReadEvents(ctx, store.EventQuery{Stream: audit, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range p.Events {
			a.audit = append(a.audit, e.Type+" "+e.Subject)
		}
		var before *store.ExecutionKey
		for {
			ex, err := s.WorkerExecutions(ctx, store.WorkerExecutionFilter{WorkerID: "w1", Before: before, Limit: 30})
			if err != nil {
				t.Fatal(err)
			}
			if len(ex) == 0 {
				return a
			}
			for _, e := range ex {
				a.executions = append(a.executions, e.ExecutionID)
			}
			before = &store.ExecutionKey{StartedAt: ex[len(ex)-1].StartedAt, ExecutionID: ex[len(ex)-1].ExecutionID}
		}
	}
	// The audit rows become readable once every transaction older than
	// theirs has ended (the log's horizon is the cluster's: another
	// database's open transaction holds it back a moment).
	var before answers
	testwait.For(t, "the audit rows below the log's horizon", func() bool {
		before = read()
		return len(before.audit) == 5
	})
	if len(before.dead) != 5 || len(before.pending) != 5 || len(before.all) != 10 || len(before.audit) != 5 || len(before.executions) != 200 {
		t.Fatalf("before the migration: %+v", before)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// A log mostly of the hot path's rows (no actor), as a real one is.
	if _, err := s.Pool().Exec(ctx, `INSERT INTO backstop_events (time, type, subjects, queues, kinds, bodies)
		SELECT now(), 'task.claimed', ARRAY['x' || g], ARRAY['q'], ARRAY['k'], '[{}]' FROM generate_series(1, 5000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, "ANALYZE backstop_tasks; ANALYZE backstop_events"); err != nil {
		t.Fatal(err)
	}
	after := read()
	jsonEqual(t, "answers after the migration", after, before)
	noScan := map[string]string{"enable_seqscan": "off", "enable_indexscan": "off"}
	for _, states := range [][]bt.State{{bt.StatePending}, nil} {
		p, err := s.ExplainList(ctx, store.ListFilter{Where: `payload.customer.id == 7`, States: states}, noScan)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(p, "backstop_tasks_payload") {
			t.Errorf("where on %v after the migration reads no payload index:\n%s", states, p)
		}
	}
	if p, err := s.ExplainAudit(ctx, map[string]string{"enable_seqscan": "off"}); err != nil || !strings.Contains(p, "backstop_events_actor") {
		t.Errorf("the audit read uses no index of actor rows (%v):\n%s", err, p)
	}
	// A worker's newest executions (200 started in the same microsecond)
	// are the worker index's last entries: no sort.
	if p, err := s.ExplainWorkerExecutions(ctx, "w1", 20); err != nil || !strings.Contains(p, "Index Scan Backward using backstop_executions_worker") ||
		strings.Contains(p, "Incremental Sort") {
		t.Errorf("a page of a worker's executions sorts them (%v):\n%s", err, p)
	}
	if err := s.MigrateDownTo(ctx, 37); err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, "answers rolled back", read(), before)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, "answers migrated again", read(), before)
}

// The store's connections run with JIT off (its compile cost a where's
// index read 110 ms), unless the URL names jit.
func TestJITOff(t *testing.T) {
	t.Parallel()
	url := testdb.Postgres(t)
	for _, c := range []struct{ url, want string }{{url, "off"}, {url + "&jit=on", "on"}} {
		s, err := pgstore.Open(t.Context(), c.url)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = s.Pool().QueryRow(t.Context(), "SHOW jit").Scan(&got)
		s.Close()
		if err != nil || got != c.want {
			t.Fatalf("%s: jit %q (%v), want %q", c.url, got, err, c.want)
		}
	}
}

// killAsBefore makes the running tasks dead letters as a version before
// migration 00050 did (this version's settle writes a column that older
// schemas lack), with their attempts' execution rows: reason and lastError
// are SQL expressions of the row.
func killAsBefore(t *testing.T, s *pgstore.Store, reason, lastError string) {
	t.Helper()
	if _, err := s.Pool().Exec(t.Context(), `INSERT INTO backstop_executions
		(execution_id, task_id, attempt, worker_id, started_at, finished_at, outcome, error)
		SELECT execution_id, id, attempt, coalesce(worker_id, ''), coalesce(attempted_at, $1), $1, 'permanent_error', `+lastError+`
		FROM backstop_tasks WHERE state = 'running'`, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(t.Context(), `UPDATE backstop_tasks SET state = 'dead', dlq_status = 'open',
		dead_reason = `+reason+`, last_error = `+lastError+`, finalized_at = $1, first_seen = $1, last_seen = $1,
		dead_count = dead_count + 1, lease_expires_at = NULL, updated_at = $1
		WHERE state = 'running'`, t0); err != nil {
		t.Fatal(err)
	}
}

// DLQGroups answers what the GROUPING SETS query it replaced answered (the
// same groups and counts, by reason and by the error's first 200
// characters), for every dead letter and for a queue's, of any status,
// through the index of fingerprints (statuses and a queue), from the rows
// (any other filter), and for dead letters without a fingerprint.
func TestDLQGroupsAsBefore(t *testing.T) {
	b := setup(t)
	long := strings.Repeat("x", 200)
	errs := []string{"timeout", "card declined", "", long + " one", long + " two", "upstream 503"}
	reasons := []bt.DeadReason{bt.ReasonPermanentError, bt.ReasonAttemptsExhausted, bt.ReasonPoison}
	for _, q := range []string{"ga", "gb"} {
		var tasks []*bt.Task
		for i := range 60 {
			tk := newTask(q)
			tk.ID = fmt.Sprintf("%s-%03d", q, i)
			tk.Kind = fmt.Sprintf("k%d", i%2)
			tasks = append(tasks, tk)
		}
		enqueue(t, b.store, store.EnqueueOpts{}, tasks...)
		var ss []store.Settlement
		for i, tk := range claim(t, b.store, q, 60, t0) {
			ss = append(ss, store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomePermanentError,
				Error: errs[i%len(errs)], FinishedAt: t0, State: bt.StateDead, DeadReason: reasons[i%2+i/50]})
		}
		settle(t, b.store, ss...)
	}
	if _, err := b.store.Pool().Exec(t.Context(), `UPDATE backstop_tasks SET dlq_status = 'discarded' WHERE id LIKE '%-01_'`); err != nil {
		t.Fatal(err)
	}
	check := func(label string) {
		t.Helper()
		for _, f := range []store.ListFilter{
			{DLQStatuses: []bt.DLQStatus{bt.DLQOpen}},
			{Queue: "ga", DLQStatuses: []bt.DLQStatus{bt.DLQOpen}},
			{DLQStatuses: []bt.DLQStatus{bt.DLQDiscarded}},
			{DLQStatuses: []bt.DLQStatus{bt.DLQOpen, bt.DLQDiscarded}, Queue: "gb"},
			{},
			{Kind: "k1", DLQStatuses: []bt.DLQStatus{bt.DLQOpen}},
		} {
			got, err := b.store.DLQGroups(t.Context(), f, 3)
			if err != nil {
				t.Fatal(err)
			}
			want := groupsAsBefore(t, b.store, f, 3)
			if want.Total == 0 || len(want.ByReason) < 2 {
				t.Fatalf("%s %+v: a poor fixture: %+v", label, f, want)
			}
			jsonEqual(t, fmt.Sprintf("%s: groups of %+v", label, f), got, want)
		}
	}
	check("fingerprinted")
	// Dead letters without a fingerprint (a path that writes none) are
	// grouped from their rows, beside those that have one.
	if _, err := b.store.Pool().Exec(t.Context(), `UPDATE backstop_tasks SET dlq_group = NULL WHERE id LIKE 'ga-%' AND id < 'ga-030'`); err != nil {
		t.Fatal(err)
	}
	check("half without fingerprints")
}

// groupsAsBefore is DLQGroups as the query before the fingerprints
// answered it: GROUPING SETS of the reason and the error's first 200
// characters over the dead letters of f's statuses, queue and kind.
func groupsAsBefore(t *testing.T, s *pgstore.Store, f store.ListFilter, limit int) *store.DLQGroups {
	t.Helper()
	statuses := []string{}
	for _, st := range f.DLQStatuses {
		statuses = append(statuses, string(st))
	}
	want := &store.DLQGroups{ByReason: []store.GroupCount{}, ByError: []store.GroupCount{}}
	rs, err := s.Pool().Query(t.Context(), `SELECT GROUPING(t.dead_reason), coalesce(t.dead_reason, ''), coalesce(left(t.last_error, 200), ''), count(*)
		FROM backstop_tasks t WHERE t.state = 'dead' AND (cardinality($1::text[]) = 0 OR t.dlq_status = ANY($1))
			AND ($2 = '' OR t.queue = $2) AND ($3 = '' OR t.kind = $3)
		GROUP BY GROUPING SETS ((t.dead_reason), (left(t.last_error, 200)))`, statuses, f.Queue, f.Kind)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for rs.Next() {
		var byError, n int
		var reason, errTxt string
		if err := rs.Scan(&byError, &reason, &errTxt, &n); err != nil {
			t.Fatal(err)
		}
		if byError == 1 {
			want.ByError = append(want.ByError, store.GroupCount{Value: errTxt, Count: n})
		} else {
			want.ByReason = append(want.ByReason, store.GroupCount{Value: reason, Count: n})
			want.Total += n
		}
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	store.SortGroups(want.ByReason)
	store.SortGroups(want.ByError)
	want.ByError, want.MoreErrors = store.CapGroups(want.ByError, limit)
	return want
}
