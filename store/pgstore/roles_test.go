package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/ordering"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

// TestLeastPrivilegeRoles applies deploy/postgres/roles.sql to a test
// schema, connects as a login role in each of its three roles, and checks
// what each may and may not do: the producer enqueues (with spill,
// idempotency, merge and debounce) but cannot claim, settle or delete; the worker
// claims, heartbeats, settles, leads and runs maintenance but cannot enqueue,
// run retention or delete; the admin can do all of it.
func TestLeastPrivilegeRoles(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	var schema string
	if err := b.store.Pool().QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	var sfx [4]byte
	_, _ = rand.Read(sfx[:])
	tag := hex.EncodeToString(sfx[:])
	groups := map[string]string{}
	for _, r := range []string{"producer", "worker", "admin"} {
		groups[r] = "backstop_" + r + "_" + tag
	}

	// The file is for psql: drop its meta-commands, fill in the schema,
	// and give the (cluster-wide) roles names of this test's own.
	raw, err := os.ReadFile("../../deploy/postgres/roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), `\`) {
			lines = append(lines, l)
		}
	}
	script := strings.ReplaceAll(strings.Join(lines, "\n"), `:"schema"`, pgx.Identifier{schema}.Sanitize())
	for r, g := range groups {
		// Whole words only: backstop_worker is a role, backstop_workers a table.
		script = regexp.MustCompile(`\bbackstop_`+r+`\b`).ReplaceAllLiteralString(script, g)
	}
	pool := b.store.Pool()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, r := range []string{"producer", "worker", "admin"} {
			for _, name := range []string{groups[r], "login_" + r + "_" + tag} {
				if _, err := pool.Exec(ctx, "DROP OWNED BY "+name); err != nil {
					t.Errorf("drop owned by %s: %v", name, err)
				}
				if _, err := pool.Exec(ctx, "DROP ROLE "+name); err != nil {
					t.Errorf("drop role %s: %v", name, err)
				}
			}
		}
	})
	if _, err := pool.Exec(ctx, script); err != nil {
		t.Fatalf("roles.sql: %v", err)
	}

	connect := func(role string) *pgstore.Store {
		t.Helper()
		login := "login_" + role + "_" + tag
		if _, err := pool.Exec(ctx, "CREATE ROLE "+login+" LOGIN IN ROLE "+groups[role]); err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(b.url)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(login)
		s, err := pgstore.Open(ctx, u.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		var who string
		if err := s.Pool().QueryRow(ctx, "SELECT current_user").Scan(&who); err != nil || who != login {
			t.Fatalf("connected as %q (%v), want %s", who, err, login)
		}
		return s
	}
	producer, worker, admin := connect("producer"), connect("worker"), connect("admin")

	denied := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Fatalf("%s: %v, want permission denied", what, err)
		}
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	rawExec := func(s *pgstore.Store, sql string) error {
		_, err := s.Pool().Exec(ctx, sql)
		return err
	}
	now := t0
	opts := store.EnqueueOpts{InlineLimit: 64, Merge: func(_ string, _ json.RawMessage, _ int, in json.RawMessage) (json.RawMessage, error) { return in, nil }}

	// Producer.
	pc, err := backstop.NewClient(producer, nil)
	must("producer client", err)
	_, err = pc.Enqueue(ctx, backstop.EnqueueParams{ID: "p-1", Queue: "q", Kind: "k"})
	must("producer enqueue", err)
	big := newTask("q")
	big.Payload = []byte(`{"big":"` + strings.Repeat("x", 200) + `"}`)
	idem := newTask("q")
	idem.IdempotencyKey = "idem-1"
	merge := newTask("q")
	merge.MergeKey = "m-1"
	merge.Payload = []byte(`{"spilled":"` + strings.Repeat("y", 200) + `"}`)
	enqueue(t, producer, opts, big, idem, merge)
	dup := newTask("q")
	dup.IdempotencyKey = "idem-1"
	if r := enqueue(t, producer, opts, dup); !r[0].Duplicate {
		t.Fatal("producer: idempotent enqueue was not a duplicate")
	}
	m2 := newTask("q")
	m2.MergeKey = "m-1"
	if r := enqueue(t, producer, opts, m2); !r[0].Merged {
		t.Fatal("producer: merge did not merge")
	}
	// A batch written by COPY, and idempotency keys resolved together.
	batch := make([]*bt.Task, 0, 30)
	for i := range 30 {
		tk := newTask("batch")
		if i >= 20 {
			tk.IdempotencyKey = fmt.Sprintf("idem-batch-%d", i%5)
		}
		batch = append(batch, tk)
	}
	if r := enqueue(t, producer, opts, batch...); !r[29].Duplicate || r[20].Duplicate {
		t.Fatal("producer: a batch's idempotency keys were not resolved")
	}
	_, err = producer.Claim(ctx, store.ClaimParams{Queue: "q", WorkerID: "p", Max: 1, Now: now, Lease: time.Minute})
	denied("producer claim", err)
	_, err = producer.Settle(ctx, []store.Settlement{{TaskID: "p-1", State: bt.StateSucceeded, FinishedAt: now}})
	denied("producer settle", err)
	_, err = producer.TryLead(ctx, "maintenance", "p", now, time.Minute)
	denied("producer lead", err)
	_, err = producer.Secret(ctx, "lease_token_key", make([]byte, 32), now)
	denied("producer secret", err)
	_, err = producer.DeleteFinished(ctx, bt.StateSucceeded, now.Add(time.Hour), 10)
	if !errors.Is(err, store.ErrPermissionDenied) {
		t.Fatalf("producer retention: %v, want ErrPermissionDenied", err)
	}
	_, err = pc.Enqueue(ctx, backstop.EnqueueParams{ID: "p-o", Queue: "oq", Kind: "k", OrderingKey: "key", Sequence: 1})
	must("producer ordered enqueue", err)
	// Workflows: the producer registers a definition and starts a run in
	// its own transaction.
	_, _, err = producer.PutWorkflow(ctx, store.WorkflowDef{Name: "order", PlanHash: "h1", CreatedAt: now,
		Definition: json.RawMessage(`{"name":"order"}`)}, nil)
	must("producer put workflow", err)
	must("producer start run", producer.InTx(ctx, func(tx store.Tx) error {
		if err := tx.InsertRun(ctx, store.RunRecord{RunID: "run-1", Workflow: "order", Version: 1, PlanHash: "h1",
			State: "running", CreatedAt: now, UpdatedAt: now}); err != nil {
			return err
		}
		return tx.PutSteps(ctx, []store.StepRecord{{RunID: "run-1", StepID: "a", TaskID: "run-1.a", State: "pending", UpdatedAt: now}})
	}))
	_, _, err = producer.GetRun(ctx, "run-1")
	must("producer get run", err)
	denied("producer run update", rawExec(producer, "UPDATE backstop_runs SET state = 'succeeded'"))
	denied("producer workflow update", rawExec(producer, "UPDATE backstop_workflows SET plan_hash = 'x'"))
	denied("producer delete", rawExec(producer, "DELETE FROM backstop_tasks"))
	denied("producer state change", rawExec(producer, "UPDATE backstop_tasks SET state = 'succeeded'"))
	denied("producer run time change", rawExec(producer, "UPDATE backstop_tasks SET run_at = now()"))
	denied("producer debounce settings change", rawExec(producer, "UPDATE backstop_tasks SET debounce_for_us = 1"))
	denied("producer lease change", rawExec(producer, "UPDATE backstop_tasks SET lease_expires_at = now()"))
	denied("producer attempt change", rawExec(producer, "UPDATE backstop_tasks SET attempt = 9"))
	// An idempotency key with a window: the window is opened through a
	// function too (no grant on unique_until).
	for i := range 2 {
		r, err := pc.Enqueue(ctx, backstop.EnqueueParams{Queue: "uq", Kind: "k", IdempotencyKey: "u-1", UniqueFor: time.Hour})
		must("producer unique-for enqueue", err)
		if r.Duplicate != (i == 1) || r.Task.UniqueUntil == nil {
			t.Fatalf("producer unique-for enqueue %d: duplicate %v, unique until %v", i, r.Duplicate, r.Task.UniqueUntil)
		}
	}
	denied("producer window change", rawExec(producer, "UPDATE backstop_tasks SET unique_until = NULL"))
	// A debounced enqueue merges into the waiting task and moves its run
	// time (the merge columns, run_at and state).
	first, err := pc.Enqueue(ctx, backstop.EnqueueParams{Queue: "dq", Kind: "k", Payload: []byte(`{"v":1}`),
		Debounce: &backstop.Debounce{Key: "doc-1", For: time.Hour, MaxWait: 2 * time.Hour}})
	must("producer debounced enqueue", err)
	second, err := pc.Enqueue(ctx, backstop.EnqueueParams{Queue: "dq", Kind: "k", Payload: []byte(`{"v":2}`),
		Debounce: &backstop.Debounce{Key: "doc-1", For: time.Hour, MaxWait: 2 * time.Hour}})
	must("producer debounce", err)
	if !second.Merged || second.Task.ID != first.Task.ID || !second.Task.RunAt.After(first.Task.RunAt) ||
		string(second.Task.Payload) != `{"v":2}` {
		t.Fatalf("producer debounce: merged %v into %s (first %s), run_at %v (first %v), payload %s",
			second.Merged, second.Task.ID, first.Task.ID, second.Task.RunAt, first.Task.RunAt, second.Task.Payload)
	}
	if got, err := producer.TaskDebounce(ctx, first.Task.ID); err != nil || got == nil || got.MaxWaitUntil == nil ||
		!got.MaxWaitUntil.Equal(first.Task.CreatedAt.Add(2*time.Hour)) || got.For != bt.Duration(time.Hour) {
		t.Fatalf("producer debounce settings: %+v (%v)", got, err)
	}
	// The debounce's functions move only a waiting task holding the
	// debounce key: not one without it, nor one that runs or has finished,
	// and never to a state but scheduled or pending.
	debounceMerge := func(id, kind, key string) (int, error) {
		var n int
		err := producer.Pool().QueryRow(ctx, `SELECT count(*) FROM backstop_debounce_merge($1, $2, $3, '{}', 2, false,
			now(), now() - interval '1 hour', 1, NULL)`, id, kind, key).Scan(&n)
		return n, err
	}
	for _, c := range []struct{ what, id, kind, key string }{
		{"a task without a merge key", "p-1", "k", ""},
		{"another key", first.Task.ID, "k", "doc-2"},
		{"another kind", first.Task.ID, "other", "doc-1"},
	} {
		if n, err := debounceMerge(c.id, c.kind, c.key); err != nil || n != 0 {
			t.Fatalf("producer debounce of %s: moved %d (%v), want none", c.what, n, err)
		}
	}
	if n, err := debounceMerge(first.Task.ID, "k", "doc-1"); err != nil || n != 1 {
		t.Fatalf("producer debounce through the function: moved %d (%v), want 1", n, err)
	}
	var state string
	if err := producer.Pool().QueryRow(ctx, "SELECT state FROM backstop_tasks WHERE id = $1", first.Task.ID).Scan(&state); err != nil ||
		state != string(bt.StatePending) {
		t.Fatalf("producer debounce through the function: %s (%v), want it pending", state, err)
	}
	denied("worker debounce function", rawExec(worker, `SELECT backstop_debounce_settings('x', 'k', 'doc-1', 1, NULL)`))
	denied("worker window function", rawExec(worker, `SELECT backstop_unique_window('x', 'u-1', NULL)`))

	// Worker.
	wc, err := backstop.NewClient(worker, nil)
	must("worker client", err)
	_, err = wc.Enqueue(ctx, backstop.EnqueueParams{Queue: "q", Kind: "k"})
	denied("worker enqueue", err)
	owc, err := backstop.NewClient(worker, &backstop.Config{Queues: map[string]backstop.QueueConfig{
		"oq": {Ordering: backstop.OrderingConfig{Enabled: true, Step: 1}}}})
	must("worker ordering client", err)
	must("worker ordering admission", owc.OrderQueue(ctx, "oq"))
	if st := owc.OrderingStats(); st.Admitted.Load() != 1 || st.Fallback.Load() != 0 {
		t.Fatalf("worker ordering admission: admitted %d, fallback %d, want 1, 0", st.Admitted.Load(), st.Fallback.Load())
	}
	// Settling it judges its key in the settle's transaction (the key
	// row's lock and writes are the worker's).
	oclaimed, err := worker.Claim(ctx, store.ClaimParams{Queue: "oq", WorkerID: "w", Max: 10, Now: now, Lease: time.Minute})
	must("worker ordered claim", err)
	if len(oclaimed) != 1 {
		t.Fatalf("worker claimed %d ordered tasks, want 1", len(oclaimed))
	}
	oks, _, err := worker.SettleOrdered(ctx, []store.Settlement{{TaskID: oclaimed[0].ID, ExecutionID: oclaimed[0].ExecutionID,
		Outcome: bt.OutcomeSucceeded, FinishedAt: now, State: bt.StateSucceeded}},
		func(string) (store.OrderingSettings, bool) {
			return store.OrderingSettings{Step: 1, KeyTTL: time.Hour, CircuitBreaker: 10, Backoff: []time.Duration{time.Second},
				Decide: ordering.Decide}, true
		}, now)
	must("worker settle with ordering admission", err)
	if len(oks) != 1 || !oks[0] {
		t.Fatalf("worker settle with ordering admission: applied %v", oks)
	}
	claimed, err := worker.Claim(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Max: 10, Now: now, Lease: time.Minute})
	must("worker claim", err)
	if len(claimed) != 4 {
		t.Fatalf("worker claimed %d tasks, want 4", len(claimed))
	}
	// The kept counts (the maintenance leader's fold and recount, the
	// dead letters' groups read from them) are the worker's.
	_, err = worker.FoldCounts(ctx)
	must("worker fold counts", err)
	_, err = worker.ReconcileCounts(ctx)
	must("worker reconcile counts", err)
	_, err = worker.DLQGroups(ctx, store.ListFilter{DLQStatuses: []bt.DLQStatus{bt.DLQOpen}}, 20)
	must("worker dead-letter groups", err)
	_, err = worker.Heartbeat(ctx, []store.Beat{{TaskID: claimed[0].ID, ExecutionID: claimed[0].ExecutionID}}, now, now.Add(time.Minute))
	must("worker heartbeat", err)
	// A queue with a rate limit (set by the admin): the worker's limited
	// claim locks the limit row and takes the bucket's token.
	must("admin rate limit", admin.SetLimit(ctx, store.Limit{Name: "rl1", Queue: "rl", Rate: 1, Burst: 1, CreatedAt: now}, bt.Event{}))
	enqueue(t, producer, opts, newTask("rl"), newTask("rl"))
	limited, err := worker.Claim(ctx, store.ClaimParams{Queue: "rl", WorkerID: "w", Max: 10, Now: now, Lease: time.Minute, Limited: true})
	must("worker limited claim", err)
	if len(limited) != 1 {
		t.Fatalf("worker claimed %d tasks under a rate limit with a burst of 1, want 1", len(limited))
	}
	denied("worker set limit", worker.SetLimit(ctx, store.Limit{Name: "rl2", Queue: "rl", Concurrency: 1, CreatedAt: now}, bt.Event{}))
	// Remote workers' lease tokens: the key is stored on first use, then read.
	key, err := worker.Secret(ctx, "lease_token_key", make([]byte, 32), now)
	must("worker secret", err)
	again, err := worker.Secret(ctx, "lease_token_key", []byte("another candidate, not stored...."), now)
	must("worker secret again", err)
	if string(again) != string(key) {
		t.Fatal("worker secret: the second read changed the key")
	}
	denied("worker secret update", rawExec(worker, "UPDATE backstop_secrets SET value = 'x'"))
	denied("worker secret delete", rawExec(worker, "DELETE FROM backstop_secrets"))
	wi := store.WorkerInfo{ID: "w", Host: "h", PID: 1, Queues: []string{"q"}, StartedAt: now, LastSeen: now}
	must("worker register", worker.RegisterWorker(ctx, wi))
	must("worker seen", worker.SeeWorker(ctx, wi, now))
	must("worker touch", worker.TouchWorkers(ctx, []string{"w"}, now.Add(time.Second)))
	must("worker log lines", worker.AppendLogs(ctx, []store.LogLine{{TaskID: claimed[1].ID, ExecutionID: claimed[1].ExecutionID,
		Seq: 1, At: now, Stream: "log", Line: "hello"}}))
	_, err = worker.AppendLeasedLogs(ctx, claimed[1].ID, claimed[1].ExecutionID, []store.LogLine{{TaskID: claimed[1].ID,
		ExecutionID: claimed[1].ExecutionID, Seq: 2, At: now, Stream: "log", Line: "again"}})
	must("worker leased log lines", err)
	_, err = worker.ExecutionLogUsage(ctx, claimed[1].ExecutionID)
	must("worker log usage", err)
	must("worker stopped", worker.SetWorkerState(ctx, "w", store.WorkerStopped, now.Add(2*time.Second)))
	var ss []store.Settlement
	for i, c := range claimed {
		s := store.Settlement{TaskID: c.ID, ExecutionID: c.ExecutionID, FinishedAt: now, Outcome: bt.OutcomeSucceeded, State: bt.StateSucceeded}
		if i == 0 {
			s.Outcome, s.State, s.DeadReason, s.Error = bt.OutcomePermanentError, bt.StateDead, bt.ReasonPermanentError, "bad"
		}
		ss = append(ss, s)
	}
	ok, err := worker.Settle(ctx, ss)
	must("worker settle", err)
	for i, applied := range ok {
		if !applied {
			t.Fatalf("worker settlement %d not applied", i)
		}
	}
	// Finished, the merge's task is out of the debounce's reach.
	if n, err := debounceMerge(merge.ID, merge.Kind, merge.MergeKey); err != nil || n != 0 {
		t.Fatalf("producer debounce of a finished task: moved %d (%v), want none", n, err)
	}
	lead, err := worker.TryLead(ctx, "maintenance", "w", now, time.Minute)
	must("worker lead", err)
	if !lead {
		t.Fatal("worker did not get the free leadership")
	}
	must("worker maintenance", backstop.Maintain(ctx, wc))
	_, err = wc.Stats(ctx)
	must("worker stats", err)
	_, err = wc.ListView(ctx, backstop.ViewRecentFailures, 10)
	must("worker view", err)
	must("worker resign", worker.ResignLead(ctx, "maintenance", "w"))
	_, err = backstop.Retain(ctx, wc)
	if !errors.Is(err, store.ErrPermissionDenied) {
		t.Fatalf("worker retention: %v, want ErrPermissionDenied", err)
	}
	// Workflows: a worker settling a step advances its run.
	_, err = worker.GetWorkflow(ctx, "order", 1)
	must("worker get workflow", err)
	must("worker advance run", worker.InTx(ctx, func(tx store.Tx) error {
		steps, err := tx.StepsOfTasks(ctx, []string{"run-1.a"})
		if err != nil {
			return err
		}
		run, _, err := tx.LockRun(ctx, "run-1")
		if err != nil {
			return err
		}
		steps[0].State, steps[0].CompletedSeq = "succeeded", 1
		run.State, run.Seq = "succeeded", 1
		if err := tx.PutSteps(ctx, steps); err != nil {
			return err
		}
		return tx.UpdateRun(ctx, *run)
	}))
	_, _, err = worker.PutWorkflow(ctx, store.WorkflowDef{Name: "order", PlanHash: "h2", Definition: json.RawMessage(`{}`)}, nil)
	denied("worker put workflow", err)
	denied("worker insert run", worker.InTx(ctx, func(tx store.Tx) error {
		return tx.InsertRun(ctx, store.RunRecord{RunID: "run-2", Workflow: "order", Version: 1, PlanHash: "h1",
			State: "running", CreatedAt: now, UpdatedAt: now})
	}))
	denied("worker delete runs", rawExec(worker, "DELETE FROM backstop_runs"))
	denied("worker delete tasks", rawExec(worker, "DELETE FROM backstop_tasks"))
	denied("worker delete executions", rawExec(worker, "DELETE FROM backstop_executions"))
	denied("worker delete events", rawExec(worker, "DELETE FROM backstop_events"))

	// Admin.
	ac, err := backstop.NewClient(admin, &backstop.Config{Clock: fixedClock(now.Add(time.Hour)),
		Retention: backstop.RetentionConfig{Succeeded: time.Minute}})
	must("admin client", err)
	_, err = ac.Enqueue(ctx, backstop.EnqueueParams{ID: "a-1", Queue: "adm", Kind: "k"})
	must("admin enqueue", err)
	for i := range 2 {
		r, err := ac.Enqueue(ctx, backstop.EnqueueParams{Queue: "adq", Kind: "k",
			Debounce: &backstop.Debounce{Key: "doc-a", For: time.Minute}})
		must("admin debounce", err)
		if r.Merged != (i == 1) {
			t.Fatalf("admin debounce %d: merged %v", i, r.Merged)
		}
	}
	_, err = admin.Claim(ctx, store.ClaimParams{Queue: "adm", WorkerID: "a", Max: 1, Now: now, Lease: time.Minute})
	must("admin claim", err)
	res, err := backstop.Retain(ctx, ac)
	must("admin retention", err)
	if res.Succeeded != 4 { // three of q, the ordered one of oq
		t.Fatalf("admin retention deleted %d succeeded tasks, want 4", res.Succeeded)
	}
	_, err = admin.PurgeDLQ(ctx, store.PurgeParams{Before: now.Add(time.Hour), Statuses: []bt.DLQStatus{bt.DLQDiscarded}})
	must("admin purge", err)
	must("admin delete", rawExec(admin, "DELETE FROM backstop_events"))
	must("admin delete", rawExec(admin, "DELETE FROM backstop_tasks WHERE state = 'dead'"))
	must("admin tokens", rawExec(admin, "DELETE FROM backstop_tokens"))
	must("admin runs", rawExec(admin, "DELETE FROM backstop_run_steps; DELETE FROM backstop_runs; DELETE FROM backstop_workflows"))
}

// fixedClock always tells the same time.
type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// TestRolesDocMatchesFile: docs/postgres-roles.md quotes roles.sql; the
// quote must not drift from the file the least-privilege test runs.
func TestRolesDocMatchesFile(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/postgres/roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/postgres-roles.md")
	if err != nil {
		t.Fatal(err)
	}
	sql := string(raw)
	i := strings.Index(sql, "GRANT USAGE ON SCHEMA")
	if i < 0 {
		t.Fatal("roles.sql: no GRANT USAGE ON SCHEMA")
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(sql[i:], "\n"), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), `\`) {
			lines = append(lines, l)
		}
	}
	if !strings.Contains(string(doc), "```sql\n"+strings.Join(lines, "\n")+"\n```") {
		t.Fatal("docs/postgres-roles.md does not quote deploy/postgres/roles.sql's grants as they are: copy them again")
	}
}
