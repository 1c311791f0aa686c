package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

// checkExact: checkKept, and the reconcile finds nothing to correct (it
// compares every (queue, state, dlq_status) and every group, dead-letter
// status included).
func checkExact(t *testing.T, s *pgstore.Store, what string) {
	t.Helper()
	checkKept(t, s, what)
	if d, err := s.ReconcileCounts(t.Context()); err != nil || d != (store.CountDrift{}) {
		t.Fatalf("%s: reconcile: %+v %v, want nothing to correct (a statement left its change uncounted)", what, d, err)
	}
}

// byHand runs an UPDATE of the tasks written past the store, as an
// operator would, and the reconcile that corrects the counts it leaves
// behind (no trigger counts it).
func byHand(t *testing.T, s *pgstore.Store, sql string) {
	t.Helper()
	if _, err := s.Pool().Exec(t.Context(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if _, err := s.ReconcileCounts(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// Without the UPDATE triggers (migration 00066) every way the store
// updates a task counts its own change of the kept counts and of the dead
// letters' groups: after each kind of update the counts and the groups
// equal the rows. A statement that changed a group and counted nothing
// would show as drift at its step.
func TestEveryUpdateCountsItself(t *testing.T) {
	b := setup(t)
	s, ctx := b.store, t.Context()
	var triggers int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'backstop_tasks'::regclass
		AND NOT tgisinternal AND tgtype & 16 <> 0`).Scan(&triggers); err != nil || triggers != 0 {
		t.Fatalf("UPDATE triggers on backstop_tasks: %d %v, want none", triggers, err)
	}
	now := t0.Add(time.Minute)
	mk := func(queue, id string, state bt.State) *bt.Task {
		tk := newTask(queue)
		tk.ID, tk.State = id, state
		if state == bt.StateScheduled {
			tk.RunAt = t0.Add(time.Hour)
		}
		return tk
	}
	var tasks []*bt.Task
	for i := range 24 {
		st := bt.StatePending
		if i%4 == 3 {
			st = bt.StateScheduled
		}
		tasks = append(tasks, mk([]string{"x", "z"}[i%2], fmt.Sprintf("up-%02d", i), st))
	}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	checkExact(t, s, "enqueued")

	x := claim(t, s, "x", 6, now)
	z := claim(t, s, "z", 6, now)
	checkExact(t, s, "claimed")
	if _, err := s.Heartbeat(ctx, []store.Beat{{TaskID: x[0].ID, ExecutionID: x[0].ExecutionID}}, now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	checkExact(t, s, "heartbeat")
	settle(t, s, succeeded(x[0], z[0])...)
	checkExact(t, s, "success settle")
	dead := func(tk *bt.Task, reason bt.DeadReason, msg string) store.Settlement {
		return store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomePermanentError, Error: msg,
			FinishedAt: now, State: bt.StateDead, DeadReason: reason}
	}
	settle(t, s,
		store.Settlement{TaskID: x[1].ID, ExecutionID: x[1].ExecutionID, Outcome: bt.OutcomeTransientError, Error: "again",
			FinishedAt: now, State: bt.StatePending, RunAt: now},
		store.Settlement{TaskID: x[2].ID, ExecutionID: x[2].ExecutionID, Outcome: bt.OutcomeTransientError, Error: "later",
			FinishedAt: now, State: bt.StateScheduled, RunAt: t0.Add(2 * time.Hour)},
		dead(x[3], bt.ReasonPermanentError, "boom"), dead(x[4], bt.ReasonPermanentError, "boom"),
		dead(z[1], bt.ReasonAttemptsExhausted, "other"), dead(z[2], bt.ReasonPermanentError, "boom"),
		dead(z[3], bt.ReasonPermanentError, "boom"), dead(z[4], bt.ReasonPermanentError, "boom"),
		store.Settlement{TaskID: z[5].ID, ExecutionID: z[5].ExecutionID, Outcome: bt.OutcomeCanceled,
			FinishedAt: now, State: bt.StateCanceled},
		// A waiting task settled without an execution (a deadline passed).
		store.Settlement{TaskID: "up-22", Outcome: bt.OutcomePermanentError, FinishedAt: now, State: bt.StateDead,
			DeadReason: bt.ReasonExpired, Error: "deadline"})
	checkExact(t, s, "general settle: retries, deaths, a cancel, a waiting task dead")
	// The lease expired: the sweep settles the attempt back to pending.
	settle(t, s, store.Settlement{TaskID: x[5].ID, ExecutionID: x[5].ExecutionID, Outcome: bt.OutcomeLeaseExpired,
		Error: "lease expired", FinishedAt: now, State: bt.StatePending, RunAt: now})
	checkExact(t, s, "lease expiry")

	if _, err := s.RequestCancel(ctx, "up-14", now); err != nil { // pending
		t.Fatal(err)
	}
	running := claim(t, s, "x", 1, now)
	if _, err := s.RequestCancel(ctx, running[0].ID, now); err != nil { // running: marked only
		t.Fatal(err)
	}
	checkExact(t, s, "cancel requests")
	if n, err := s.PromoteScheduled(ctx, t0.Add(90*time.Minute), 100); err != nil || n == 0 {
		t.Fatalf("promote: %d %v", n, err)
	}
	checkExact(t, s, "scheduled promoted")

	// A debounced merge moves a waiting task between pending and scheduled
	// (backstop_debounce_merge); a plain merge changes no group.
	merge := func(_ string, _ json.RawMessage, _ int, in json.RawMessage) (json.RawMessage, error) { return in, nil }
	keyed := func(runAt time.Time) *bt.Task {
		tk := mk("m", "", bt.StatePending)
		tk.ID, tk.MergeKey, tk.RunAt = fmt.Sprintf("mg-%d", runAt.Unix()), "mk", runAt
		if runAt.After(now) {
			tk.State = bt.StateScheduled
		}
		return tk
	}
	enqueue(t, s, store.EnqueueOpts{Merge: merge}, keyed(now))
	debounced := store.EnqueueOpts{Merge: merge, Debounce: []store.Debounce{{Debounced: true, For: time.Hour}}}
	enqueue(t, s, debounced, keyed(now.Add(time.Hour)))
	checkExact(t, s, "debounced merge: pending to scheduled")
	enqueue(t, s, debounced, keyed(now.Add(-time.Second)))
	checkExact(t, s, "debounced merge: scheduled to pending")
	enqueue(t, s, store.EnqueueOpts{Merge: merge}, keyed(now))
	checkExact(t, s, "plain merge")

	// The dead letters: discard, resolve, replay in place and as a copy,
	// dead-lettering a success as another's cause.
	status := func(id string, st bt.DLQStatus) {
		t.Helper()
		if _, err := s.SetDLQStatus(ctx, store.DLQStatusChange{ID: id, Status: st, Now: now,
			Event: bt.Event{Type: "dlq.status", Subject: id, Time: now}}); err != nil {
			t.Fatal(err)
		}
	}
	status(x[3].ID, bt.DLQDiscarded)
	status(z[1].ID, bt.DLQResolved)
	checkExact(t, s, "discarded, resolved")
	replay := func(id, newID string) {
		t.Helper()
		if _, err := s.Replay(ctx, id, func(*bt.Task) (*store.ReplayPlan, error) {
			return &store.ReplayPlan{NewID: newID, State: bt.StatePending, RunAt: now, Now: now}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	replay(x[4].ID, "")
	replay(z[2].ID, "up-copy")
	checkExact(t, s, "replayed in place and as a copy")
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if got, err := s.Txs().DeadLetterAs(ctx, tx, store.DeadLetterAs{ID: z[0].ID, Cause: z[3].ID, Now: now,
		Event: bt.Event{Type: "task.dead", Subject: z[0].ID, Time: now}}); err != nil || got == nil {
		t.Fatalf("dead letter as: %v %v", got, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	checkExact(t, s, "a success dead-lettered as another's cause")

	// Redrive: the one-statement batch, then a batch that takes the slow
	// way (a dead letter whose idempotency key a live task holds).
	redrive := func(ids ...string) store.RedriveBatchResult {
		t.Helper()
		res, err := s.RedriveBatch(ctx, store.RedriveBatch{Snapshot: now.Add(time.Hour), Limit: 100, RunAt: now,
			State: bt.StatePending, Now: now, Actor: "ops", IDs: ids})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	redrive(z[3].ID)
	checkExact(t, s, "redriven, one statement")
	key := mk("k", "ik-1", bt.StatePending)
	key.IdempotencyKey = "ik"
	enqueue(t, s, store.EnqueueOpts{}, key)
	kx := claim(t, s, "k", 1, now)
	settle(t, s, dead(kx[0], bt.ReasonPermanentError, "boom"))
	live := mk("k", "ik-2", bt.StatePending)
	live.IdempotencyKey = "ik"
	enqueue(t, s, store.EnqueueOpts{}, live)
	if res := redrive(kx[0].ID, z[4].ID); len(res.Conflicts) != 1 {
		t.Fatalf("redrive with a conflict: %+v, want one conflict", res)
	}
	checkExact(t, s, "redriven one by one past a conflict")

	// Bulk task actions: cancel, run now, reprioritize.
	act := func(action string, ids ...string) {
		t.Helper()
		if _, err := s.ApplyTaskAction(ctx, store.TaskActionBatch{Action: action, IDs: ids, Now: now, Actor: "ops", Priority: 5}); err != nil {
			t.Fatal(err)
		}
	}
	act(store.JobTaskCancel, "up-16", "up-18")
	act(store.JobTaskRunNow, x[2].ID)
	act(store.JobTaskReprioritize, "up-20")
	checkExact(t, s, "bulk cancel, run now, reprioritize")

	// Ordered tasks: admitted from buffered, replayed back to buffered,
	// the fallback making a queue's buffered tasks pending.
	c, err := backstop.NewClient(s, &backstop.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Queues: map[string]backstop.QueueConfig{"oq": {Ordering: backstop.OrderingConfig{Enabled: true, Step: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range []int64{1, 2, 4} {
		if _, err := c.Enqueue(ctx, backstop.EnqueueParams{ID: fmt.Sprintf("oq-%d", seq), Queue: "oq", Kind: "r",
			OrderingKey: "k", Sequence: seq}); err != nil {
			t.Fatal(err)
		}
	}
	checkExact(t, s, "ordered tasks enqueued")
	if err := c.OrderQueue(ctx, "oq"); err != nil {
		t.Fatal(err)
	}
	checkExact(t, s, "ordered task admitted")
	oq, err := s.Claim(ctx, store.ClaimParams{Queue: "oq", WorkerID: "w1", Max: 1, Now: time.Now(), Lease: time.Minute})
	if err != nil || len(oq) != 1 {
		t.Fatalf("claim ordered: %d %v", len(oq), err)
	}
	settle(t, s, dead(oq[0], bt.ReasonPermanentError, "ordered boom"))
	if err := c.OrderQueue(ctx, "oq"); err != nil {
		t.Fatal(err)
	}
	checkExact(t, s, "ordered task dead, the next admitted")
	replay(oq[0].ID, "")
	checkExact(t, s, "ordered dead letter replayed (buffered)")
	// A sequence the key has passed is stale: canceled when judged.
	if _, err := c.Enqueue(ctx, backstop.EnqueueParams{ID: "oq-stale", Queue: "oq", Kind: "r", OrderingKey: "k", Sequence: 1}); err != nil {
		t.Fatal(err)
	}
	if err := c.OrderQueue(ctx, "oq"); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "oq-stale"); got.State != bt.StateCanceled {
		t.Fatalf("stale ordered task: %s, want canceled", got.State)
	}
	checkExact(t, s, "stale ordered task canceled")
	if _, err := s.OrderingFallback(ctx, "oq", now); err != nil {
		t.Fatal(err)
	}
	checkExact(t, s, "ordering fallback")
}

// updateTriggers counts the user triggers on backstop_tasks that fire on
// UPDATE.
func updateTriggers(t *testing.T, s *pgstore.Store) int {
	t.Helper()
	var n int
	if err := s.Pool().QueryRow(t.Context(), `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'backstop_tasks'::regclass
		AND NOT tgisinternal AND tgtype & 16 <> 0`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Migration 00066 on a database holding data of schema 65 (tasks of every
// state, dead letters with groups, tasks running, a debounced task
// waiting): the UPDATE triggers go, and the counts and the groups stay
// exact through claims, successes, deaths, redrives, cancels, promotions
// and debounced merges (backstop_debounce_merge now counting itself),
// tasks claimed before it settled after it; down to 65 the triggers are
// back and skip the statements, which mark themselves counted; up again;
// nothing to reconcile at any step.
func TestUpdatesCountThemselvesMigration(t *testing.T) {
	t.Parallel()
	s, ctx := storeAt(t, 65), t.Context()
	seedCounts(t, s, 300)
	running := claim(t, s, "z", 12, t0.Add(time.Minute))
	merge := func(_ string, _ json.RawMessage, _ int, in json.RawMessage) (json.RawMessage, error) { return in, nil }
	debounced := store.EnqueueOpts{Merge: merge, Debounce: []store.Debounce{{Debounced: true, For: time.Hour}}}
	n := 0
	debounce := func(runAt time.Time) {
		t.Helper()
		n++
		tk := newTask("db")
		tk.ID, tk.MergeKey, tk.RunAt = fmt.Sprintf("db-%d", n), "key", runAt
		if runAt.After(t0) {
			tk.State = bt.StateScheduled
		}
		enqueue(t, s, debounced, tk)
	}
	debounce(t0)
	if updateTriggers(t, s) != 2 {
		t.Fatal("at 65: want the two UPDATE triggers")
	}
	checkExact(t, s, "at 65")
	at := t0.Add(2 * time.Minute)
	round := func(what string, q string) {
		t.Helper()
		at = at.Add(time.Minute)
		got := claim(t, s, q, 9, at)
		checkExact(t, s, what+": claimed")
		settle(t, s, append(succeeded(got[:5]...), killed("round "+what, at, got[5:7]...)...)...)
		settle(t, s, succeeded(got[7:]...)...)
		checkExact(t, s, what+": settled and killed")
		if n := redriveQueue(t, s, "rd-"+what, q, at); n == 0 {
			t.Fatalf("%s: nothing redriven", what)
		}
		checkExact(t, s, what+": redriven")
		if _, err := s.RequestCancel(ctx, claim(t, s, q, 1, at)[0].ID, at); err != nil {
			t.Fatal(err)
		}
		settle(t, s, succeeded(claim(t, s, q, 1000, at.Add(time.Second))...)...)
		checkExact(t, s, what+": cancel requested, the rest succeeded")
		debounce(t0.Add(time.Hour)) // pending to scheduled
		checkExact(t, s, what+": debounced to later")
		debounce(t0) // scheduled to pending
		if _, err := s.PromoteScheduled(ctx, t0.Add(2*time.Hour), 1000); err != nil {
			t.Fatal(err)
		}
		checkExact(t, s, what+": debounced to now, promoted")
	}
	step := func(what string, to int64, down bool, triggers int) {
		t.Helper()
		var err error
		if down {
			err = s.MigrateDownTo(ctx, to)
		} else {
			err = s.MigrateTo(ctx, to)
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var v int64
		if err := s.Pool().QueryRow(ctx, `SELECT max(version_id) FROM backstop_schema_version WHERE is_applied`).Scan(&v); err != nil || v != to {
			t.Fatalf("%s: schema at %d (%v), want %d", what, v, err, to)
		}
		if got := updateTriggers(t, s); got != triggers {
			t.Fatalf("%s: %d UPDATE triggers, want %d", what, got, triggers)
		}
		checkExact(t, s, what)
	}
	step("at66", 66, false, 0)
	settle(t, s, append(succeeded(running[:4]...), killed("claimed before", at, running[4:6]...)...)...)
	checkExact(t, s, "claimed before 66, settled after")
	round("x66", "x")
	step("down65", 65, true, 2)
	settle(t, s, succeeded(running[6:9]...)...)
	round("y65", "y")
	step("up66", 66, false, 0)
	settle(t, s, killed("claimed before, up again", at, running[9:]...)...)
	round("z66", "z")
}
