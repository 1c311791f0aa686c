package pgstore_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
	"github.com/backstophq/backstop/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// t0 is the tests' clock: every time the store sees is derived from it.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)

type testBundle struct {
	store *pgstore.Store
	url   string
}

// setup opens a migrated store on a fresh schema.
func setup(t *testing.T) *testBundle {
	t.Helper()
	t.Parallel()
	url := testdb.Postgres(t)
	s, err := pgstore.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return &testBundle{store: s, url: url}
}

func newTask(queue string) *bt.Task {
	return &bt.Task{
		ID:          uuid.Must(uuid.NewV7()).String(),
		Queue:       queue,
		Kind:        "k",
		State:       bt.StatePending,
		MaxAttempts: 3,
		Payload:     json.RawMessage(`{"n": 1}`),
		RunAt:       t0,
		CreatedAt:   t0,
		UpdatedAt:   t0,
	}
}

func enqueue(t *testing.T, s store.Store, opts store.EnqueueOpts, tasks ...*bt.Task) []store.EnqueueResult {
	t.Helper()
	res, err := s.Enqueue(t.Context(), tasks, opts)
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	if len(res) != len(tasks) {
		t.Fatalf("enqueue: %d results for %d tasks", len(res), len(tasks))
	}
	return res
}

func claim(t *testing.T, s store.Store, queue string, max int, now time.Time) []*bt.Task {
	t.Helper()
	got, err := s.Claim(t.Context(), store.ClaimParams{
		Queue: queue, WorkerID: "w1", Max: max, Now: now, Lease: time.Minute,
	})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return got
}

func get(t *testing.T, s store.Store, id string) *bt.Task {
	t.Helper()
	got, err := s.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return got
}

func settle(t *testing.T, s store.Store, st ...store.Settlement) []bool {
	t.Helper()
	applied, err := s.Settle(t.Context(), st)
	if err != nil {
		t.Fatalf("settle: %v", err)
	}
	return applied
}

func ids(tasks []*bt.Task) []string {
	out := make([]string, len(tasks))
	for i, t := range tasks {
		out[i] = t.ID
	}
	return out
}

func jsonEqual(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("%s:\n got %s\nwant %s", what, g, w)
	}
}

func TestMigrate(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	// Migrating again is a no-op.
	if err := b.store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	status, err := b.store.MigrationStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(status) == 0 || status[0].Version != 1 || status[0].Name != "00001_tasks.sql" {
		t.Fatalf("status = %+v", status)
	}
	for _, m := range status {
		if m.AppliedAt == nil {
			t.Errorf("migration %d not applied", m.Version)
		} else if d := time.Since(*m.AppliedAt); d < 0 || d > time.Hour {
			t.Errorf("migration %d applied at %s, %s ago", m.Version, m.AppliedAt, d)
		}
	}
	// Everything lives in the connection's own schema.
	var schema string
	var tables []string
	err = b.store.Pool().QueryRow(ctx, `SELECT current_schema(), array_agg(tablename::text ORDER BY tablename)
		FROM pg_tables WHERE schemaname = current_schema()`).Scan(&schema, &tables)
	if err != nil {
		t.Fatal(err)
	}
	// Later migrations add tables; these must be there, and nothing but
	// Backstop's own.
	want := []string{"backstop_executions", "backstop_leaders", "backstop_payloads", "backstop_schema_version", "backstop_tasks"}
	if schema == "public" || slices.ContainsFunc(want, func(w string) bool { return !slices.Contains(tables, w) }) ||
		slices.ContainsFunc(tables, func(x string) bool { return !strings.HasPrefix(x, "backstop_") }) {
		t.Errorf("schema %s has tables %v, want %v and only backstop_ tables", schema, tables, want)
	}
}

func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	url := testdb.Postgres(t)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() {
			s, err := pgstore.Open(t.Context(), url)
			if err != nil {
				errs[i] = err
				return
			}
			defer s.Close()
			errs[i] = s.Migrate(t.Context())
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func TestRoundTrip(t *testing.T) {
	b := setup(t)
	s := b.store
	deadline := t0.Add(time.Hour)
	jitter := false
	task := newTask("default")
	task.Kind = "send_email"
	task.Payload = json.RawMessage("{\"b\":  2, \"a\":1}") // bytes kept exactly
	task.Attributes = map[string]string{"run_id": "r1", "tenant": "acme"}
	task.Priority = 5
	task.Timeout = bt.Duration(90*time.Second + 1500) // below a microsecond is dropped
	task.Deadline = &deadline
	task.Retry = &bt.RetryPolicy{Schedule: []bt.Duration{bt.Duration(time.Second)}, Jitter: &jitter}
	task.Progress = bt.Progress{Total: 10, Completed: 2}
	task.Complexity = 1.5
	task.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	task.RunAt = time.Date(2030, 1, 2, 4, 4, 5, 123456789, time.FixedZone("CET", 3600)) // = t0
	task.MaxAttempts = 7

	res := enqueue(t, s, store.EnqueueOpts{}, task)
	if res[0].Merged || res[0].Duplicate {
		t.Fatalf("result = %+v", res[0])
	}
	stored := res[0].Task
	if !stored.RunAt.Equal(t0) || stored.RunAt.Location() != time.UTC {
		t.Errorf("run_at = %s, want %s", stored.RunAt, t0)
	}
	if time.Duration(stored.Timeout) != 90*time.Second+1000 || stored.PayloadSize != len(task.Payload) {
		t.Errorf("timeout %s, payload_size %d", stored.Timeout, stored.PayloadSize)
	}
	got := get(t, s, task.ID)
	jsonEqual(t, "get after enqueue", got, stored)
	if string(got.Payload) != string(task.Payload) {
		t.Errorf("payload = %s, want the exact bytes %s", got.Payload, task.Payload)
	}

	claimed := claim(t, s, "default", 10, t0.Add(time.Second))
	if len(claimed) != 1 {
		t.Fatalf("claimed %d tasks", len(claimed))
	}
	c := claimed[0]
	now := t0.Add(time.Second)
	if c.State != bt.StateRunning || c.Attempt != 1 || c.WorkerID != "w1" || c.ExecutionID == "" ||
		!c.AttemptedAt.Equal(now) || !c.LeaseExpiresAt.Equal(now.Add(time.Minute)) || !c.UpdatedAt.Equal(now) {
		t.Errorf("claimed task = %+v", c)
	}
	if string(c.Payload) != string(task.Payload) || c.Attributes["tenant"] != "acme" {
		t.Errorf("claimed payload %s, attributes %v", c.Payload, c.Attributes)
	}
	if more := claim(t, s, "default", 10, now); len(more) != 0 {
		t.Errorf("claimed a running task again: %v", ids(more))
	}

	beats, err := s.Heartbeat(t.Context(), []store.Beat{
		{TaskID: c.ID, ExecutionID: c.ExecutionID, Progress: &bt.Progress{Total: 10, Completed: 7}},
	}, now.Add(time.Second), now.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if beats[0].Lost || beats[0].CancelRequested || beats[0].TaskID != c.ID {
		t.Errorf("beat = %+v", beats[0])
	}
	if got := get(t, s, c.ID); !got.LeaseExpiresAt.Equal(now.Add(2*time.Minute)) || got.Progress.Completed != 7 {
		t.Errorf("after heartbeat: lease %s, progress %+v", got.LeaseExpiresAt, got.Progress)
	}

	done := now.Add(3 * time.Second)
	applied := settle(t, s, store.Settlement{
		TaskID: c.ID, ExecutionID: c.ExecutionID, Outcome: bt.OutcomeSucceeded,
		FinishedAt: done, State: bt.StateSucceeded, Progress: &bt.Progress{Total: 10, Completed: 10},
	})
	if !applied[0] {
		t.Fatal("settlement not applied")
	}
	got = get(t, s, c.ID)
	if got.State != bt.StateSucceeded || got.FinalizedAt == nil || !got.FinalizedAt.Equal(done) ||
		got.LeaseExpiresAt != nil || got.Progress.Completed != 10 || got.Attempt != 1 || !got.UpdatedAt.Equal(done) {
		t.Errorf("after settle = %+v", got)
	}
	want := []bt.Execution{{
		ExecutionID: c.ExecutionID, TaskID: c.ID, Attempt: 1, WorkerID: "w1",
		StartedAt: now, FinishedAt: &done, Outcome: bt.OutcomeSucceeded,
	}}
	jsonEqual(t, "executions", got.Executions, want)
}

func TestGetNotFound(t *testing.T) {
	b := setup(t)
	_, err := b.store.Get(t.Context(), "nope")
	if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "nope") {
		t.Errorf("err = %v, want ErrNotFound naming the id", err)
	}
}

func TestClaimOrderAndFilters(t *testing.T) {
	b := setup(t)
	s := b.store
	mk := func(prio int, runAt time.Time) *bt.Task {
		task := newTask("q")
		task.Priority, task.RunAt = prio, runAt
		return task
	}
	low := mk(0, t0.Add(-time.Minute))
	highLate := mk(9, t0)
	highEarly := mk(9, t0.Add(-time.Hour))
	future := mk(10, t0.Add(time.Hour))
	expired := mk(10, t0)
	past := t0.Add(-time.Second)
	expired.Deadline = &past
	otherKind := mk(10, t0)
	otherKind.Kind = "other"
	otherQueue := newTask("elsewhere")
	scheduled := mk(10, t0)
	scheduled.State = bt.StateScheduled
	enqueue(t, s, store.EnqueueOpts{}, low, highLate, highEarly, future, expired, otherKind, otherQueue, scheduled)

	got := claim(t, s, "q", 2, t0)
	if g, w := ids(got), []string{otherKind.ID, highEarly.ID}; !slices.Equal(g, w) {
		t.Errorf("first claim = %v, want %v", g, w)
	}
	got, err := s.Claim(t.Context(), store.ClaimParams{Queue: "q", Kinds: []string{"k"}, WorkerID: "w", Max: 10, Now: t0, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if g, w := ids(got), []string{highLate.ID, low.ID}; !slices.Equal(g, w) {
		t.Errorf("second claim = %v, want %v (not future, expired, scheduled or other queues)", g, w)
	}
	if got := claim(t, s, "q", 10, t0); len(got) != 0 {
		t.Errorf("third claim = %v", ids(got))
	}
}

// TestClaimSkipLocked races claimers over one queue: every task is claimed
// exactly once.
func TestClaimSkipLocked(t *testing.T) {
	b := setup(t)
	s := b.store
	const n, claimers = 2000, 8
	tasks := make([]*bt.Task, n)
	for i := range tasks {
		tasks[i] = newTask("race")
	}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)

	var (
		mu     sync.Mutex
		seen   = make(map[string]string)
		dupes  []string
		errs   = make([]error, claimers)
		wg     sync.WaitGroup
		empty  = make([]int, claimers)
		counts = make([]int, claimers)
	)
	for w := range claimers {
		wg.Go(func() {
			worker := fmt.Sprintf("w%d", w)
			for empty[w] < 3 {
				got, err := s.Claim(t.Context(), store.ClaimParams{Queue: "race", WorkerID: worker, Max: 7, Now: t0, Lease: time.Minute})
				if err != nil {
					errs[w] = err
					return
				}
				if len(got) == 0 {
					empty[w]++
					continue
				}
				counts[w] += len(got)
				mu.Lock()
				for _, task := range got {
					if prev, ok := seen[task.ID]; ok {
						dupes = append(dupes, task.ID+" by "+prev+" and "+worker)
					}
					seen[task.ID] = worker
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if len(dupes) > 0 {
		t.Fatalf("claimed twice: %v", dupes)
	}
	if len(seen) != n {
		t.Fatalf("claimed %d distinct tasks, want %d", len(seen), n)
	}
	t.Logf("claims per worker: %v", counts)
}

func TestEnqueueManyAcrossChunks(t *testing.T) {
	b := setup(t)
	tasks := make([]*bt.Task, 2500)
	for i := range tasks {
		tasks[i] = newTask("bulk")
	}
	res := enqueue(t, b.store, store.EnqueueOpts{}, tasks...)
	for i, r := range res {
		if r.Task.ID != tasks[i].ID {
			t.Fatalf("result %d is %s, want %s (input order)", i, r.Task.ID, tasks[i].ID)
		}
	}
	var n int
	if err := b.store.Pool().QueryRow(t.Context(), "SELECT count(*) FROM backstop_tasks").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(tasks) {
		t.Errorf("%d rows, want %d", n, len(tasks))
	}
	// Thousand-row statements are not left prepared on the connections.
	for _, c := range b.store.Pool().AcquireAllIdle(t.Context()) {
		var big int
		err := c.QueryRow(t.Context(), `SELECT count(*) FROM pg_prepared_statements
			WHERE statement LIKE 'INSERT INTO backstop_tasks%' AND cardinality(parameter_types) > 100`).Scan(&big)
		c.Release()
		if err != nil {
			t.Fatal(err)
		}
		if big > 0 {
			t.Errorf("a connection keeps %d large prepared inserts", big)
		}
	}
}

func TestEnqueueConflict(t *testing.T) {
	b := setup(t)
	s := b.store
	first := newTask("q")
	enqueue(t, s, store.EnqueueOpts{}, first)

	again := newTask("q")
	again.ID = first.ID
	fresh := newTask("q")
	for _, batch := range [][]*bt.Task{{fresh, again}, {fresh, withKey(again, "key")}} {
		_, err := s.Enqueue(t.Context(), batch, store.EnqueueOpts{})
		if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), first.ID) {
			t.Errorf("err = %v, want ErrConflict naming %s", err, first.ID)
		}
		if _, err := s.Get(t.Context(), fresh.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a failed batch left %s behind (err %v)", fresh.ID, err)
		}
	}
	// The same id twice in one batch.
	dup := newTask("q")
	_, err := s.Enqueue(t.Context(), []*bt.Task{dup, dup}, store.EnqueueOpts{})
	if !errors.Is(err, store.ErrConflict) {
		t.Errorf("err = %v, want ErrConflict", err)
	}
}

func withKey(task *bt.Task, key string) *bt.Task {
	c := *task
	c.IdempotencyKey = key
	return &c
}

func TestIdempotencyKey(t *testing.T) {
	b := setup(t)
	s := b.store
	first := withKey(newTask("q"), "order-42")
	second := withKey(newTask("q"), "order-42")
	second.Payload = json.RawMessage(`{"other":true}`)
	res := enqueue(t, s, store.EnqueueOpts{}, first, second)
	if res[0].Duplicate || !res[1].Duplicate || res[1].Task.ID != first.ID {
		t.Fatalf("results: %+v / %+v", res[0], res[1])
	}
	if string(res[1].Task.Payload) != string(first.Payload) {
		t.Errorf("duplicate payload = %s", res[1].Task.Payload)
	}
	if _, err := s.Get(t.Context(), second.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("duplicate was inserted: %v", err)
	}
	// Re-enqueueing the same task (outbox retry) is a duplicate, not a conflict.
	res = enqueue(t, s, store.EnqueueOpts{}, first)
	if !res[0].Duplicate {
		t.Errorf("re-enqueue: %+v", res[0])
	}

	// Once the task is no longer live, the key is free again.
	c := claim(t, s, "q", 1, t0)[0]
	settle(t, s, store.Settlement{TaskID: c.ID, ExecutionID: c.ExecutionID, Outcome: bt.OutcomeSucceeded, FinishedAt: t0, State: bt.StateSucceeded})
	third := withKey(newTask("q"), "order-42")
	res = enqueue(t, s, store.EnqueueOpts{}, third)
	if res[0].Duplicate || res[0].Task.ID != third.ID {
		t.Errorf("after success: %+v", res[0])
	}
}

// TestIdempotencyKeyRace enqueues the same key from many transactions at
// once: exactly one task is inserted, every other enqueue gets it back.
func TestIdempotencyKeyRace(t *testing.T) {
	b := setup(t)
	const n = 8
	results := make([]store.EnqueueResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, err := b.store.Enqueue(t.Context(), []*bt.Task{withKey(newTask("q"), "once")}, store.EnqueueOpts{})
			if err == nil {
				results[i] = res[0]
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	inserted := 0
	for _, r := range results {
		if !r.Duplicate {
			inserted++
		}
		if r.Task.ID != results[0].Task.ID {
			t.Errorf("got task %s and %s for one key", r.Task.ID, results[0].Task.ID)
		}
	}
	if inserted != 1 {
		t.Errorf("%d enqueues inserted, want 1", inserted)
	}
}

// appendMerge makes the payload a list of every merged payload.
func appendMerge(kind string, existing json.RawMessage, mergeCount int, incoming json.RawMessage) (json.RawMessage, error) {
	var list []json.RawMessage
	if mergeCount == 0 {
		list = []json.RawMessage{existing}
	} else if err := json.Unmarshal(existing, &list); err != nil {
		return nil, err
	}
	return json.Marshal(append(list, incoming))
}

func TestMergeKey(t *testing.T) {
	b := setup(t)
	s := b.store
	opts := store.EnqueueOpts{Merge: appendMerge}
	mk := func(n int) *bt.Task {
		task := newTask("q")
		task.MergeKey = "user-1"
		task.Payload = json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))
		task.UpdatedAt = t0.Add(time.Duration(n) * time.Second)
		return task
	}
	first, second, third := mk(1), mk(2), mk(3)
	res := enqueue(t, s, opts, first, second)
	if res[0].Merged || !res[1].Merged || res[1].Task.ID != first.ID {
		t.Fatalf("results: %+v / %+v", res[0], res[1])
	}
	res = enqueue(t, s, opts, third)
	got := res[0].Task
	if !res[0].Merged || got.MergeCount != 2 || string(got.Payload) != `[{"n":1},{"n":2},{"n":3}]` ||
		!got.UpdatedAt.Equal(third.UpdatedAt) || got.PayloadSize != len(got.Payload) {
		t.Errorf("after two merges: %+v payload %s", got, got.Payload)
	}
	jsonEqual(t, "get after merge", get(t, s, first.ID), got)

	// A different kind does not merge.
	other := mk(4)
	other.Kind = "other"
	if res := enqueue(t, s, opts, other); res[0].Merged {
		t.Error("merged across kinds")
	}
	// A running task no longer merges.
	claim(t, s, "q", 10, t0)
	fourth := mk(5)
	if res := enqueue(t, s, opts, fourth); res[0].Merged || res[0].Task.ID != fourth.ID {
		t.Errorf("merged into a running task: %+v", res[0])
	}

	// A failing merge function fails the whole enqueue.
	boom := errors.New("boom")
	_, err := s.Enqueue(t.Context(), []*bt.Task{newTask("q"), mk(6)}, store.EnqueueOpts{
		Merge: func(string, json.RawMessage, int, json.RawMessage) (json.RawMessage, error) { return nil, boom },
	})
	if !errors.Is(err, boom) {
		t.Errorf("err = %v, want the merge error", err)
	}
}

func TestSpill(t *testing.T) {
	b := setup(t)
	s := b.store
	opts := store.EnqueueOpts{InlineLimit: 64, Merge: appendMerge}
	big := newTask("q")
	big.Payload = json.RawMessage(`{"blob":"` + strings.Repeat("x", 1000) + `"}`)
	small := newTask("q")
	res := enqueue(t, s, opts, big, small)
	if !res[0].Task.PayloadSpilled || res[1].Task.PayloadSpilled || res[0].Task.PayloadSize != len(big.Payload) {
		t.Fatalf("spilled: %v %v", res[0].Task.PayloadSpilled, res[1].Task.PayloadSpilled)
	}
	var inlineIsNull bool
	var side int
	err := s.Pool().QueryRow(t.Context(), `SELECT payload IS NULL, (SELECT length(data) FROM backstop_payloads WHERE task_id = $1)
		FROM backstop_tasks WHERE id = $1`, big.ID).Scan(&inlineIsNull, &side)
	if err != nil {
		t.Fatal(err)
	}
	if !inlineIsNull || side != len(big.Payload) {
		t.Errorf("tasks.payload null: %v, side storage %d bytes", inlineIsNull, side)
	}
	if got := get(t, s, big.ID); string(got.Payload) != string(big.Payload) {
		t.Errorf("get payload = %.40s…", got.Payload)
	}
	for _, c := range claim(t, s, "q", 10, t0) {
		if c.ID == big.ID && string(c.Payload) != string(big.Payload) {
			t.Errorf("claimed payload = %.40s…", c.Payload)
		}
	}
	list, err := s.List(t.Context(), store.ListFilter{Queue: "q"})
	if err != nil || len(list) != 2 || string(list[0].Payload) != string(big.Payload) {
		t.Errorf("list: %v, %d tasks", err, len(list))
	}

	// Merging grows a payload past the limit: it spills.
	m1 := newTask("q")
	m1.MergeKey, m1.Payload = "m", json.RawMessage(`{"s":"`+strings.Repeat("y", 40)+`"}`)
	m2 := newTask("q")
	m2.MergeKey, m2.Payload = "m", m1.Payload
	res = enqueue(t, s, opts, m1, m2)
	if res[0].Task.PayloadSpilled || !res[1].Merged || !res[1].Task.PayloadSpilled {
		t.Errorf("merge spill: %+v", res[1])
	}
	want := `[` + string(m1.Payload) + `,` + string(m2.Payload) + `]`
	if got := get(t, s, m1.ID); string(got.Payload) != want || got.PayloadSize != len(want) || !got.PayloadSpilled {
		t.Errorf("merged spilled payload = %s", got.Payload)
	}
}

func TestEnqueueTx(t *testing.T) {
	b := setup(t)
	s := b.store
	ctx := t.Context()

	t.Run("pgx committed", func(t *testing.T) {
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		task := newTask("tx")
		if _, err := s.EnqueueTx(ctx, tx, []*bt.Task{task}, store.EnqueueOpts{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, task.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("visible before commit: %v", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		get(t, s, task.ID)
	})

	t.Run("pgx rolled back", func(t *testing.T) {
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		task := newTask("tx")
		if _, err := s.EnqueueTx(ctx, tx, []*bt.Task{task}, store.EnqueueOpts{}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, task.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("task of a rolled back transaction exists: %v", err)
		}
	})

	t.Run("database/sql", func(t *testing.T) {
		db, err := sql.Open("pgx", b.url)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		key := withKey(newTask("tx"), "sql-key")
		key.Attributes = map[string]string{"a": "b"}
		tasks := []*bt.Task{newTask("tx"), key, withKey(newTask("tx"), "sql-key")}
		res, err := s.EnqueueTx(ctx, tx, tasks, store.EnqueueOpts{InlineLimit: 4})
		if err != nil {
			t.Fatal(err)
		}
		if !res[2].Duplicate || res[2].Task.ID != key.ID || res[2].Task.Attributes["a"] != "b" || string(res[2].Task.Payload) != string(key.Payload) {
			t.Errorf("duplicate through database/sql: %+v", res[2])
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks[:2] {
			if got := get(t, s, task.ID); string(got.Payload) != string(task.Payload) || !got.PayloadSpilled {
				t.Errorf("payload %s, spilled %v", got.Payload, got.PayloadSpilled)
			}
		}
	})

	t.Run("failure leaves the caller's transaction usable", func(t *testing.T) {
		existing := newTask("tx")
		enqueue(t, s, store.EnqueueOpts{}, existing)
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		before := newTask("tx")
		if _, err := s.EnqueueTx(ctx, tx, []*bt.Task{before}, store.EnqueueOpts{}); err != nil {
			t.Fatal(err)
		}
		lost := newTask("tx")
		if _, err := s.EnqueueTx(ctx, tx, []*bt.Task{lost, existing}, store.EnqueueOpts{}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("err = %v, want ErrConflict", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		get(t, s, before.ID)
		if _, err := s.Get(ctx, lost.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the failed enqueue left %s behind: %v", lost.ID, err)
		}
	})

	t.Run("wrong transaction type", func(t *testing.T) {
		if _, err := s.EnqueueTx(ctx, "tx", []*bt.Task{newTask("tx")}, store.EnqueueOpts{}); err == nil {
			t.Error("no error")
		}
	})
}

func TestWakeups(t *testing.T) {
	b := setup(t)
	s := b.store
	ctx, cancel := context.WithCancel(t.Context())
	wake := s.Wakeups(ctx)
	expect := func(queue string) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case q := <-wake:
				if q == queue {
					return
				}
			case <-timeout:
				t.Fatalf("no wake-up for %s", queue)
			}
		}
	}

	enqueue(t, s, store.EnqueueOpts{}, newTask("enqueued"))
	expect("enqueued")

	// A retry that is due at once wakes its queue.
	enqueue(t, s, store.EnqueueOpts{}, newTask("retried"))
	expect("retried")
	c := claim(t, s, "retried", 1, t0)[0]
	settle(t, s, store.Settlement{TaskID: c.ID, ExecutionID: c.ExecutionID, Outcome: bt.OutcomeTransientError,
		FinishedAt: t0, State: bt.StatePending, RunAt: t0})
	expect("retried")

	later := newTask("promoted")
	later.State, later.RunAt = bt.StateScheduled, t0.Add(time.Minute)
	enqueue(t, s, store.EnqueueOpts{}, later)
	if n, err := s.PromoteScheduled(t.Context(), t0.Add(time.Minute), 10); err != nil || n != 1 {
		t.Fatalf("promoted %d: %v", n, err)
	}
	expect("promoted")

	cancel()
	for range wake { // closed once ctx ends
	}
}

func TestWakeupsStopOnClose(t *testing.T) {
	t.Parallel()
	s, err := pgstore.Open(t.Context(), testdb.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	wake := s.Wakeups(context.Background())
	_ = s.Close()
	for range wake {
	}
	if _, ok := <-s.Wakeups(context.Background()); ok {
		t.Error("Wakeups after Close delivered")
	}
}

// TestWakeupsReconnect kills the listening connection: the listener
// reconnects and wake-ups flow again.
func TestWakeupsReconnect(t *testing.T) {
	t.Parallel()
	app := "backstop_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	s, err := pgstore.Open(t.Context(), testdb.Postgres(t)+"&application_name="+app)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	wake := s.Wakeups(t.Context())
	var killed int
	err = s.Pool().QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND query LIKE 'LISTEN%'`, app).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminated %d listeners: %v", killed, err)
	}
	timeout := time.After(10 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case q := <-wake:
			if q == "after" {
				return
			}
		case <-tick.C:
			enqueue(t, s, store.EnqueueOpts{}, newTask("after"))
		case <-timeout:
			t.Fatal("no wake-up after the listener's connection was killed")
		}
	}
}

func TestStaleSettlement(t *testing.T) {
	b := setup(t)
	s := b.store
	task := newTask("q")
	enqueue(t, s, store.EnqueueOpts{}, task)
	first := claim(t, s, "q", 1, t0)[0]

	// Wrong execution id: not applied, nothing recorded.
	if applied := settle(t, s, store.Settlement{TaskID: task.ID, ExecutionID: "other", Outcome: bt.OutcomeSucceeded,
		FinishedAt: t0, State: bt.StateSucceeded}); applied[0] {
		t.Error("applied a settlement for another execution")
	}
	// The lease expires and is settled by maintenance; the task runs again.
	expired, err := s.ExpiredLeases(t.Context(), t0.Add(2*time.Minute), 10)
	if err != nil || len(expired) != 1 || expired[0].ID != task.ID {
		t.Fatalf("expired leases: %v %v", ids(expired), err)
	}
	if applied := settle(t, s, store.Settlement{TaskID: task.ID, ExecutionID: first.ExecutionID, Outcome: bt.OutcomeLeaseExpired,
		Error: "lease expired", FinishedAt: t0.Add(2 * time.Minute), State: bt.StatePending, RunAt: t0.Add(2 * time.Minute)}); !applied[0] {
		t.Fatal("lease expiry not applied")
	}
	second := claim(t, s, "q", 1, t0.Add(3*time.Minute))[0]
	if second.Attempt != 2 || second.ExecutionID == first.ExecutionID || second.LastError != "lease expired" {
		t.Fatalf("second claim: %+v", second)
	}

	// The first worker wakes up late: its heartbeat and settlement are stale.
	beats, err := s.Heartbeat(t.Context(), []store.Beat{
		{TaskID: task.ID, ExecutionID: first.ExecutionID},
		{TaskID: task.ID, ExecutionID: second.ExecutionID},
		{TaskID: task.ID, ExecutionID: second.ExecutionID}, // sent twice: held twice
	}, t0.Add(3*time.Minute), t0.Add(4*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if !beats[0].Lost || beats[1].Lost || beats[2].Lost {
		t.Errorf("beats = %+v", beats)
	}
	applied := settle(t, s,
		store.Settlement{TaskID: task.ID, ExecutionID: first.ExecutionID, Outcome: bt.OutcomeSucceeded, FinishedAt: t0.Add(4 * time.Minute), State: bt.StateSucceeded},
		store.Settlement{TaskID: "missing", ExecutionID: "x", Outcome: bt.OutcomeSucceeded, FinishedAt: t0.Add(4 * time.Minute), State: bt.StateSucceeded},
		store.Settlement{TaskID: task.ID, ExecutionID: second.ExecutionID, Outcome: bt.OutcomeSucceeded, FinishedAt: t0.Add(5 * time.Minute), State: bt.StateSucceeded},
	)
	if !slices.Equal(applied, []bool{false, false, true}) {
		t.Errorf("applied = %v", applied)
	}
	execs := get(t, s, task.ID).Executions
	if len(execs) != 2 || execs[0].Outcome != bt.OutcomeLeaseExpired || execs[1].Outcome != bt.OutcomeSucceeded || execs[1].Attempt != 2 {
		t.Errorf("executions = %+v", execs)
	}
}

func TestSettleStates(t *testing.T) {
	b := setup(t)
	s := b.store
	retried, snoozed, dead, expired := newTask("q"), newTask("q"), newTask("q"), newTask("q")
	deadline := t0.Add(time.Second)
	expired.Deadline = &deadline
	expired.State = bt.StateScheduled
	enqueue(t, s, store.EnqueueOpts{}, retried, snoozed, dead, expired)
	claimed := claim(t, s, "q", 3, t0)
	exec := map[string]string{}
	for _, c := range claimed {
		exec[c.ID] = c.ExecutionID
	}
	at := t0.Add(time.Second)
	applied := settle(t, s,
		store.Settlement{TaskID: retried.ID, ExecutionID: exec[retried.ID], Outcome: bt.OutcomeTransientError,
			Error: "HTTP 503", ErrorDetail: "trace", FinishedAt: at, State: bt.StateScheduled, RunAt: at.Add(time.Minute)},
		store.Settlement{TaskID: snoozed.ID, ExecutionID: exec[snoozed.ID], Outcome: bt.OutcomeSnoozed,
			FinishedAt: at, State: bt.StateScheduled, RunAt: at.Add(time.Hour), Uncharged: true},
		store.Settlement{TaskID: dead.ID, ExecutionID: exec[dead.ID], Outcome: bt.OutcomePermanentError,
			Error: "HTTP 400", FinishedAt: at, State: bt.StateDead, DeadReason: bt.ReasonPermanentError},
		// Deadline sweep of a task that is not running: no execution.
		store.Settlement{TaskID: expired.ID, Outcome: bt.OutcomeCanceled, Error: "deadline passed",
			FinishedAt: at, State: bt.StateDead, DeadReason: bt.ReasonExpired},
	)
	if !slices.Equal(applied, []bool{true, true, true, true}) {
		t.Fatalf("applied = %v", applied)
	}

	got := get(t, s, retried.ID)
	if got.State != bt.StateScheduled || !got.RunAt.Equal(at.Add(time.Minute)) || got.Attempt != 1 ||
		got.LastError != "HTTP 503" || got.LeaseExpiresAt != nil || got.FinalizedAt != nil {
		t.Errorf("retried = %+v", got)
	}
	if e := got.Executions; len(e) != 1 || e[0].Error != "HTTP 503" || e[0].ErrorDetail != "trace" || e[0].Outcome != bt.OutcomeTransientError {
		t.Errorf("retried executions = %+v", e)
	}
	got = get(t, s, snoozed.ID)
	if got.Attempt != 0 || got.State != bt.StateScheduled || len(got.Executions) != 1 || got.Executions[0].Attempt != 1 {
		t.Errorf("snoozed = %+v", got)
	}
	got = get(t, s, dead.ID)
	if got.State != bt.StateDead || got.DeadReason != bt.ReasonPermanentError || got.DLQStatus != bt.DLQOpen ||
		!got.FirstSeen.Equal(at) || !got.LastSeen.Equal(at) || got.DeadCount != 1 || !got.FinalizedAt.Equal(at) ||
		got.LastError != "HTTP 400" || got.LeaseExpiresAt != nil {
		t.Errorf("dead = %+v", got)
	}
	got = get(t, s, expired.ID)
	if got.State != bt.StateDead || got.DeadReason != bt.ReasonExpired || len(got.Executions) != 0 {
		t.Errorf("expired = %+v", got)
	}

	// An empty execution id never touches a running task.
	running := newTask("r")
	enqueue(t, s, store.EnqueueOpts{}, running)
	claim(t, s, "r", 1, t0)
	if applied := settle(t, s, store.Settlement{TaskID: running.ID, FinishedAt: at, State: bt.StateDead, DeadReason: bt.ReasonExpired}); applied[0] {
		t.Error("settled a running task without its execution id")
	}
}

func TestDeadTwiceKeepsFirstSeen(t *testing.T) {
	b := setup(t)
	s := b.store
	task := newTask("q")
	enqueue(t, s, store.EnqueueOpts{}, task)
	for i, at := range []time.Time{t0.Add(time.Minute), t0.Add(time.Hour)} {
		c := claim(t, s, "q", 1, at.Add(-time.Second))[0]
		settle(t, s, store.Settlement{TaskID: c.ID, ExecutionID: c.ExecutionID, Outcome: bt.OutcomePermanentError,
			FinishedAt: at, State: bt.StateDead, DeadReason: bt.ReasonPermanentError})
		if i == 0 { // an operator replays it (not a store method yet)
			if _, err := s.Pool().Exec(t.Context(), "UPDATE backstop_tasks SET state = 'pending' WHERE id = $1", task.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := get(t, s, task.ID)
	if !got.FirstSeen.Equal(t0.Add(time.Minute)) || !got.LastSeen.Equal(t0.Add(time.Hour)) || got.DeadCount != 2 {
		t.Errorf("first_seen %s last_seen %s dead_count %d", got.FirstSeen, got.LastSeen, got.DeadCount)
	}
}

func TestRequestCancel(t *testing.T) {
	b := setup(t)
	s := b.store
	pending, running, done := newTask("q"), newTask("q"), newTask("q")
	running.Priority, done.Priority = 2, 1
	enqueue(t, s, store.EnqueueOpts{}, pending, running, done)
	claimed := claim(t, s, "q", 2, t0)
	d := claimed[1]
	settle(t, s, store.Settlement{TaskID: d.ID, ExecutionID: d.ExecutionID, Outcome: bt.OutcomeSucceeded, FinishedAt: t0, State: bt.StateSucceeded})

	at := t0.Add(time.Second)
	got, err := s.RequestCancel(t.Context(), pending.ID, at)
	if err != nil || got.State != bt.StateCanceled || !got.FinalizedAt.Equal(at) || !got.CancelRequestedAt.Equal(at) {
		t.Errorf("cancel pending: %+v %v", got, err)
	}
	got, err = s.RequestCancel(t.Context(), running.ID, at)
	if err != nil || got.State != bt.StateRunning || !got.CancelRequestedAt.Equal(at) || got.FinalizedAt != nil {
		t.Errorf("cancel running: %+v %v", got, err)
	}
	beats, err := s.Heartbeat(t.Context(), []store.Beat{{TaskID: running.ID, ExecutionID: claimed[0].ExecutionID}}, at, at.Add(time.Minute))
	if err != nil || beats[0].Lost || !beats[0].CancelRequested {
		t.Errorf("beat after cancel: %+v %v", beats, err)
	}
	if _, err := s.RequestCancel(t.Context(), done.ID, at); !errors.Is(err, store.ErrConflict) {
		t.Errorf("cancel succeeded task: %v", err)
	}
	if _, err := s.RequestCancel(t.Context(), "missing", at); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("cancel missing task: %v", err)
	}
}

func TestList(t *testing.T) {
	b := setup(t)
	s := b.store
	a, bb, c := newTask("qa"), newTask("qa"), newTask("qb")
	a.Attributes = map[string]string{"run_id": "r1", "x": "y"}
	bb.Attributes = map[string]string{"run_id": "r2"}
	c.Kind = "other"
	c.State = bt.StateScheduled
	enqueue(t, s, store.EnqueueOpts{}, a, bb, c)

	cases := []struct {
		name string
		f    store.ListFilter
		want []string
	}{
		{"all", store.ListFilter{}, []string{a.ID, bb.ID, c.ID}},
		{"queue", store.ListFilter{Queue: "qa"}, []string{a.ID, bb.ID}},
		{"kind", store.ListFilter{Kind: "other"}, []string{c.ID}},
		{"states", store.ListFilter{States: []bt.State{bt.StateScheduled, bt.StateDead}}, []string{c.ID}},
		{"attrs", store.ListFilter{Attrs: map[string]string{"run_id": "r1"}}, []string{a.ID}},
		{"cursor", store.ListFilter{AfterID: a.ID, Limit: 1}, []string{bb.ID}},
		{"reason", store.ListFilter{Reason: bt.ReasonPoison}, nil},
	}
	for _, tc := range cases {
		got, err := s.List(t.Context(), tc.f)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !slices.Equal(ids(got), tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, ids(got), tc.want)
		}
	}
}

func TestMaintenanceSweeps(t *testing.T) {
	b := setup(t)
	s := b.store
	soon, late := newTask("q"), newTask("q")
	soon.State, soon.RunAt = bt.StateScheduled, t0.Add(time.Minute)
	late.State, late.RunAt = bt.StateScheduled, t0.Add(time.Hour)
	d1, d2 := t0.Add(time.Minute), t0.Add(2*time.Minute)
	soon.Deadline, late.Deadline = &d2, &d1
	enqueue(t, s, store.EnqueueOpts{}, soon, late)

	past, err := s.PastDeadline(t.Context(), t0.Add(3*time.Minute), 10)
	if err != nil || !slices.Equal(ids(past), []string{late.ID, soon.ID}) {
		t.Errorf("past deadline = %v, %v", ids(past), err)
	}
	n, err := s.PromoteScheduled(t.Context(), t0.Add(time.Minute), 10)
	if err != nil || n != 1 {
		t.Fatalf("promoted %d, %v", n, err)
	}
	if got := get(t, s, soon.ID); got.State != bt.StatePending {
		t.Errorf("soon is %s", got.State)
	}
	if got := get(t, s, late.ID); got.State != bt.StateScheduled {
		t.Errorf("late is %s", got.State)
	}
}

// BenchmarkDrain measures how fast claimers drain a queue, claiming batches
// and settling them as succeeded; it reports tasks/s. BACKSTOP_BENCH_BATCH
// (default 100) and BACKSTOP_BENCH_CLAIMERS (default 4) shape the load,
// BACKSTOP_BENCH_PAYLOAD the payload; BACKSTOP_BENCH_NO_PAYLOAD_INDEX=1
// drops the payload's GIN index first (what the index costs the drain, and
// the set-up's enqueue: enqueued/s).
func BenchmarkDrain(b *testing.B) {
	ctx := context.Background()
	s, err := pgstore.Open(ctx, testdb.Postgres(b))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	if os.Getenv("BACKSTOP_BENCH_NO_PAYLOAD_INDEX") == "1" {
		if _, err := s.Pool().Exec(ctx, "DROP INDEX backstop_tasks_payload"); err != nil {
			b.Fatal(err)
		}
	}
	storetest.BenchDrain(b, s)
}

func TestConformance(t *testing.T) {
	open := func(t *testing.T) store.Store {
		s, err := pgstore.Open(context.Background(), testdb.Postgres(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s
	}
	pgxTx := func(ctx context.Context, st store.Store) (any, func() error, func() error, error) {
		tx, err := st.(*pgstore.Store).Pool().Begin(ctx)
		if err != nil {
			return nil, nil, nil, err
		}
		return tx, func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) }, nil
	}
	sqlTx := func(ctx context.Context, st store.Store) (any, func() error, func() error, error) {
		db := stdlib.OpenDBFromPool(st.(*pgstore.Store).Pool())
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			db.Close()
			return nil, nil, nil, err
		}
		end := func(f func() error) func() error {
			return func() error { return errors.Join(f(), db.Close()) }
		}
		return tx, end(tx.Commit), end(tx.Rollback), nil
	}
	// The typed composable writes (pgstore.Txs) on a pgx.Tx the caller
	// began on the pool.
	boundPgxTx := func(ctx context.Context, st store.Store) (store.Tx, func() error, func() error, error) {
		s := st.(*pgstore.Store)
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			return nil, nil, nil, err
		}
		return store.Bind(s.Txs(), tx), func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) }, nil
	}
	storetest.Run(t, open, storetest.WithTx("pgx.Tx", pgxTx), storetest.WithTx("sql.Tx", sqlTx),
		storetest.WithBoundTx("pgx.Tx", boundPgxTx), storetest.WithXidBurner(burnXids),
		storetest.WithLockWaitProbe(lockRunWaiting))
}

// lockRunWaiting says whether a backend of this database waits for a lock
// in a statement on backstop_runs (LockRun's SELECT … FOR UPDATE; without
// the lock, the UPDATE after it).
func lockRunWaiting(ctx context.Context, st store.Store) (bool, error) {
	var waiting bool
	err := st.(*pgstore.Store).Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'
		AND query LIKE '%backstop_runs%')`).Scan(&waiting)
	return waiting, err
}

// burnXids brings the cluster's transaction counter to a few short of the
// next power of ten: each subtransaction that writes takes an xid of its
// own, so one DO block takes ~150,000 a second (measured: 200,000 in
// 1.36 s; the counter starts near 1,000 on scripts/with-postgres's fresh
// cluster, and a whole test run stays well below 1,000,000).
func burnXids(ctx context.Context, st store.Store) error {
	pool := st.(*pgstore.Store).Pool()
	var cur uint64
	if err := pool.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&cur); err != nil {
		return err
	}
	target := uint64(10)
	for target <= cur+20 {
		target *= 10
	}
	if target-cur > 3_000_000 { // ~20 s of burning
		return fmt.Errorf("transaction id %d, next power of ten %d: %w", cur, target, storetest.ErrXidTooFar)
	}
	for left := target - cur - 10; left > 0; {
		n := min(left, 200_000)
		if _, err := pool.Exec(ctx, fmt.Sprintf(`DO $$ BEGIN
			CREATE TEMP TABLE IF NOT EXISTS backstop_xid_burn (x int);
			FOR i IN 1..%d LOOP
				BEGIN
					INSERT INTO backstop_xid_burn VALUES (1);
					RAISE EXCEPTION 'burn';
				EXCEPTION WHEN raise_exception THEN NULL;
				END;
			END LOOP;
		END $$`, n)); err != nil {
			return err
		}
		left -= n
	}
	return nil
}

func benchInt(env string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(env)); err == nil {
		return v
	}
	return def
}
