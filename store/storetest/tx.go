package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// BoundTxFunc begins a transaction of the driver's own type (pgx.Tx,
// *sql.Tx) and binds its TxStore to it (store.Bind): the typed path a
// caller who holds such a transaction takes.
type BoundTxFunc func(ctx context.Context, s store.Store) (tx store.Tx, commit, rollback func() error, err error)

// WithBoundTx adds a driver's typed transaction for the composable-write
// tests (tx.go); every driver is also tested through Store.InTx.
func WithBoundTx(name string, f BoundTxFunc) Option {
	return func(s *suite) { s.boundTx = append(s.boundTx, namedBoundTx{name, f}) }
}

type namedBoundTx struct {
	name  string
	begin BoundTxFunc
}

var errBoom = errors.New("boom")

// testTx: settle, enqueue and event append composed in one transaction
// (store/tx.go) commit together or not at all, and their events follow
// invariant 5 (DESIGN.md): written in the transaction of the change, and a
// follower by cursor never skips them.
func (s *suite) testTx(t *testing.T) {
	t.Run("CommitTogether", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		s.txCommit(t, b, b.store.InTx)
	})
	t.Run("ErrorRollsBackAll", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		s.txRollback(t, b, func(ctx context.Context, fn func(store.Tx) error) error {
			err := b.store.InTx(ctx, func(tx store.Tx) error {
				if err := fn(tx); err != nil {
					return err
				}
				return errBoom
			})
			if !errors.Is(err, errBoom) {
				t.Fatalf("InTx: %v, want fn's error", err)
			}
			return nil
		})
	})
	t.Run("PanicRollsBackAll", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		s.txRollback(t, b, func(ctx context.Context, fn func(store.Tx) error) (err error) {
			defer func() {
				if r := recover(); r != errBoom {
					t.Fatalf("recovered %v, want fn's panic", r)
				}
			}()
			return b.store.InTx(ctx, func(tx store.Tx) error {
				if err := fn(tx); err != nil {
					return err
				}
				panic(errBoom)
			})
		})
	})
	t.Run("FailedOperationRollsBackAll", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		s.txRollback(t, b, func(ctx context.Context, fn func(store.Tx) error) error {
			err := b.store.InTx(ctx, func(tx store.Tx) error {
				if err := fn(tx); err != nil {
					return err
				}
				// A task id that exists: the enqueue fails, and fn goes on
				// as if it had not.
				_, err := tx.Enqueue(ctx, []*bt.Task{newTask(b, "step", "wf")}, store.EnqueueOpts{})
				if !errors.Is(err, store.ErrConflict) {
					t.Errorf("enqueue of an existing id: %v, want ErrConflict", err)
				}
				if err := tx.AppendEvents(ctx, []bt.Event{stepEvent(b, "late")}); err == nil {
					t.Error("an operation after a failed one was accepted")
				}
				return nil
			})
			if !errors.Is(err, store.ErrConflict) {
				t.Fatalf("InTx: %v, want the failed enqueue's ErrConflict", err)
			}
			return nil
		})
	})
	t.Run("BadEventsWriteNothing", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		s.txRollback(t, b, func(ctx context.Context, fn func(store.Tx) error) error {
			for _, e := range []bt.Event{
				{Time: b.clock.Now(), Subject: "step"},                                        // no type
				{Type: "test.step", Subject: "step"},                                          // no time
				{Type: "test.step", Time: b.clock.Now(), Body: json.RawMessage(`[1]`)},        // not an object
				{Type: "test.step", Time: b.clock.Now(), Body: json.RawMessage(`{"a":`)},      // not JSON
				{Type: "test.step", Time: b.clock.Now(), Body: json.RawMessage(`{"a":1} {}`)}, // two values
			} {
				err := b.store.InTx(ctx, func(tx store.Tx) error {
					if err := fn(tx); err != nil {
						return err
					}
					return tx.AppendEvents(ctx, []bt.Event{stepEvent(b, "ok"), e})
				})
				if err == nil {
					t.Fatalf("event %+v was accepted", e)
				}
			}
			return nil
		})
	})
	t.Run("HandleEndsWithInTx", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		var kept store.Tx
		if err := b.store.InTx(b.ctx, func(tx store.Tx) error { kept = tx; return nil }); err != nil {
			t.Fatal(err)
		}
		if _, err := kept.Enqueue(b.ctx, []*bt.Task{newTask(b, "after", "wf")}, store.EnqueueOpts{}); !errors.Is(err, store.ErrTxDone) {
			t.Fatalf("enqueue through a finished transaction: %v, want ErrTxDone", err)
		}
		if _, err := b.c.Get(b.ctx, "after"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("task enqueued through a finished transaction: %v", err)
		}
	})
	t.Run("CloseDeadLetter", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.dead(backstop.EnqueueParams{ID: "dl1", Queue: "q", Kind: "k"})
		b.enqueue(backstop.EnqueueParams{ID: "live1", Queue: "q", Kind: "k"})
		change := func(id string) store.DLQStatusChange {
			now := b.clock.Now()
			return store.DLQStatusChange{ID: id, Status: bt.DLQResolved, Now: now,
				Event: store.NewEvent(now, "dlq.resolved", id, "", "", "ops", []byte(`{"note":"tx"}`))}
		}
		// Rolled back: still open, no event.
		err := b.store.InTx(b.ctx, func(tx store.Tx) error {
			if ok, err := tx.CloseDeadLetter(b.ctx, change("dl1")); err != nil || !ok {
				t.Fatalf("close an open dead letter: %v %v", ok, err)
			}
			return errBoom
		})
		if !errors.Is(err, errBoom) || b.get("dl1").DLQStatus != bt.DLQOpen || len(b.events("dl1")) != 0 {
			t.Fatalf("rolled back: %v, %s, %v", err, b.get("dl1").DLQStatus, b.events("dl1"))
		}
		// Committed with its event; a task that is not an open dead letter
		// is left alone without failing the transaction.
		err = b.store.InTx(b.ctx, func(tx store.Tx) error {
			if ok, err := tx.CloseDeadLetter(b.ctx, change("live1")); err != nil || ok {
				t.Fatalf("close a live task: %v %v, want false, nil", ok, err)
			}
			ok, err := tx.CloseDeadLetter(b.ctx, change("dl1"))
			if err != nil || !ok {
				t.Fatalf("close: %v %v", ok, err)
			}
			return nil
		})
		evs := b.events("dl1") // its dlq.* events
		if err != nil || b.get("dl1").DLQStatus != bt.DLQResolved || len(evs) != 1 || evs[0] != "dlq.resolved/ops" {
			t.Fatalf("committed: %v, %s, %v", err, b.get("dl1").DLQStatus, evs)
		}
		if b.get("live1").State != bt.StatePending || len(b.events("live1")) != 0 {
			t.Fatalf("the live task changed: %+v %v", b.get("live1"), b.events("live1"))
		}
	})
	t.Run("DeadLetterAs", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.enqueue(backstop.EnqueueParams{ID: "step1", Queue: "okq", Kind: "k"})
		got := claim(t, b, "okq", 1)
		b.succeed(got[0])
		b.dead(backstop.EnqueueParams{ID: "step1.sink", Queue: "q", Kind: "k"})
		b.enqueue(backstop.EnqueueParams{ID: "live1", Queue: "q", Kind: "k"})
		as := func(id, cause string) store.DeadLetterAs {
			now := b.clock.Now()
			return store.DeadLetterAs{ID: id, Cause: cause, Now: now,
				Event: store.NewEvent(now, store.EventDeadLettered, id, "", "", "", []byte(`{"reason":"permanent_error"}`))}
		}
		// Rolled back: still succeeded.
		err := b.store.InTx(b.ctx, func(tx store.Tx) error {
			if dl, err := tx.DeadLetterAs(b.ctx, as("step1", "step1.sink")); err != nil || dl == nil || dl.State != bt.StateDead {
				t.Fatalf("dead-letter a succeeded task: %+v %v", dl, err)
			}
			return errBoom
		})
		if !errors.Is(err, errBoom) || b.get("step1").State != bt.StateSucceeded {
			t.Fatalf("rolled back: %v, %s", err, b.get("step1").State)
		}
		// A live task, or a cause that is not dead, changes nothing.
		err = b.store.InTx(b.ctx, func(tx store.Tx) error {
			for _, c := range []store.DeadLetterAs{as("live1", "step1.sink"), as("step1", "live1")} {
				if dl, err := tx.DeadLetterAs(b.ctx, c); err != nil || dl != nil {
					t.Fatalf("%s as %s: %+v %v, want nil, nil", c.ID, c.Cause, dl, err)
				}
			}
			dl, err := tx.DeadLetterAs(b.ctx, as("step1", "step1.sink"))
			if err != nil || dl == nil || dl.ID != "step1" {
				t.Fatalf("dead-letter: %+v %v", dl, err)
			}
			return nil
		})
		step := b.get("step1")
		if err != nil || step.State != bt.StateDead || step.DLQStatus != bt.DLQOpen || step.DeadReason != bt.ReasonPermanentError ||
			step.LastError != "boom: step1.sink" || step.DeadCount != 1 {
			t.Fatalf("committed: %v, %+v", err, step)
		}
		if len(step.Executions) != 1 || step.Executions[0].Outcome != bt.OutcomeSucceeded {
			t.Fatalf("executions %+v, want the handler's one success, none invented", step.Executions)
		}
		evs, err := b.c.Events(b.ctx, "step1")
		if err != nil || evs[len(evs)-1].Type != store.EventDeadLettered || evs[len(evs)-1].Queue != "okq" {
			t.Fatalf("events %v %+v", err, evs)
		}
		if b.get("live1").State != bt.StatePending {
			t.Fatalf("the live task changed: %+v", b.get("live1"))
		}
	})
	t.Run("FollowerNeverSkips", s.txFollower)
	t.Run("WakesItsQueues", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		_, flaky := twoSteps(t, b)
		wake := b.store.Wakeups(b.ctx)
		err := b.store.InTx(b.ctx, func(tx store.Tx) error {
			if _, err := tx.Settle(b.ctx, []store.Settlement{{TaskID: flaky.ID, ExecutionID: flaky.ExecutionID,
				Outcome: bt.OutcomeTransientError, FinishedAt: b.clock.Now(), State: bt.StatePending, RunAt: b.clock.Now()}}); err != nil {
				return err
			}
			_, err := tx.Enqueue(b.ctx, []*bt.Task{newTask(b, "woken", "wq")}, store.EnqueueOpts{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		// Workers hear of both queues (a retry back to pending, a new
		// task), not only at their next poll.
		want := map[string]bool{"wf": true, "wq": true}
		deadline := time.After(20 * time.Second)
		for len(want) > 0 {
			select {
			case q := <-wake:
				delete(want, q)
			case <-deadline:
				t.Fatalf("no wake-up for %v after the transaction committed", want)
			}
		}
	})
	for _, k := range s.boundTx {
		t.Run(k.name, func(t *testing.T) {
			t.Run("Commit", func(t *testing.T) {
				t.Parallel()
				b := s.setup(t, nil)
				s.txCommit(t, b, func(ctx context.Context, fn func(store.Tx) error) error {
					tx, commit, rollback, err := k.begin(ctx, b.store)
					if err != nil {
						return err
					}
					if err := fn(tx); err != nil {
						return errors.Join(err, rollback())
					}
					return commit()
				})
			})
			t.Run("Rollback", func(t *testing.T) {
				t.Parallel()
				b := s.setup(t, nil)
				s.txRollback(t, b, func(ctx context.Context, fn func(store.Tx) error) error {
					tx, _, rollback, err := k.begin(ctx, b.store)
					if err != nil {
						return err
					}
					if err := fn(tx); err != nil {
						return errors.Join(err, rollback())
					}
					return rollback()
				})
			})
		})
	}
}

// runTx runs fn in one transaction and ends it (how depends on the test).
type runTx func(ctx context.Context, fn func(store.Tx) error) error

// newTask is a task as the engine prepares it for Store.Enqueue.
func newTask(b *bundle, id, queue string) *bt.Task {
	now := b.clock.Now()
	return &bt.Task{ID: id, Queue: queue, Kind: "k", State: bt.StatePending, MaxAttempts: 3,
		Payload: json.RawMessage(`{"from":"step"}`), RunAt: now, CreatedAt: now, UpdatedAt: now,
		Attributes: map[string]string{"run_id": "r1"}}
}

// stepEvent is an event the engine appends about the step.
func stepEvent(b *bundle, note string) bt.Event {
	return store.NewEvent(b.clock.Now(), "test.step_done", "step", "wf", "k", "engine", fmt.Appendf(nil, `{"note":%q}`, note))
}

// twoSteps enqueues and claims "step" and "flaky" in queue wf.
func twoSteps(t *testing.T, b *bundle) (step, flaky *backstop.Task) {
	t.Helper()
	b.enqueue(backstop.EnqueueParams{ID: "step", Queue: "wf", Kind: "k"})
	b.enqueue(backstop.EnqueueParams{ID: "flaky", Queue: "wf", Kind: "k"})
	got := claim(t, b, "wf", 2)
	if len(got) != 2 {
		t.Fatalf("claimed %d tasks, want 2", len(got))
	}
	for _, task := range got {
		if task.ID == "step" {
			step = task
		} else {
			flaky = task
		}
	}
	return step, flaky
}

// composed is a workflow step's transaction: the step succeeds (the
// success-only settle statement), another attempt goes back to wait (the
// general one), the successor is enqueued, and the engine's own event is
// appended.
func composed(t *testing.T, b *bundle, step, flaky *backstop.Task) func(store.Tx) error {
	return func(tx store.Tx) error {
		now := b.clock.Now()
		applied, err := tx.Settle(b.ctx, []store.Settlement{{TaskID: step.ID, ExecutionID: step.ExecutionID,
			Outcome: bt.OutcomeSucceeded, FinishedAt: now, State: bt.StateSucceeded}})
		if err != nil {
			return err
		}
		eq(t, "step settled", applied, []bool{true})
		applied, err = tx.Settle(b.ctx, []store.Settlement{{TaskID: flaky.ID, ExecutionID: flaky.ExecutionID,
			Outcome: bt.OutcomeTransientError, Error: "flaked", FinishedAt: now, State: bt.StateScheduled, RunAt: now.Add(time.Hour)}})
		if err != nil {
			return err
		}
		eq(t, "flaky settled", applied, []bool{true})
		res, err := tx.Enqueue(b.ctx, []*bt.Task{newTask(b, "next", "wf"), newTask(b, "next2", "wf2")}, store.EnqueueOpts{})
		if err != nil {
			return err
		}
		eq(t, "enqueued", len(res), 2)
		eq(t, "enqueued id", res[0].Task.ID, "next")
		return tx.AppendEvents(b.ctx, []bt.Event{stepEvent(b, "done")})
	}
}

func (s *suite) txCommit(t *testing.T, b *bundle, run runTx) {
	step, flaky := twoSteps(t, b)
	if err := run(b.ctx, composed(t, b, step, flaky)); err != nil {
		t.Fatal(err)
	}
	eq(t, "step", b.get("step").State, backstop.StateSucceeded)
	eq(t, "step executions", outcomes(b.get("step")), []backstop.Outcome{backstop.OutcomeSucceeded})
	fl := b.get("flaky")
	eq(t, "flaky", fl.State, backstop.StateScheduled)
	eq(t, "flaky executions", outcomes(fl), []backstop.Outcome{backstop.OutcomeTransientError})
	eq(t, "next", b.get("next").State, backstop.StatePending)
	eq(t, "next2", b.get("next2").Queue, "wf2")
	eq(t, "next attributes", b.get("next").Attributes["run_id"], "r1")
	// The successor is claimable as any task is.
	if got := claim(t, b, "wf", 5); len(got) != 1 || got[0].ID != "next" {
		t.Fatalf("claimed %v, want the successor", got)
	}
	eq(t, "step history", strings.Join(b.types("step"), " "),
		"task.enqueued task.claimed task.started task.succeeded test.step_done")
	eq(t, "flaky history", strings.Join(b.types("flaky"), " "),
		"task.enqueued task.claimed task.started task.failed task.retry_scheduled")
	eq(t, "next history", strings.Join(b.types("next"), " "), "task.enqueued task.claimed")
	evs, err := b.c.Events(b.ctx, "step")
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	eq(t, "appended actor", last.Actor, "engine")
	eq(t, "appended queue", last.Queue, "wf")
	eq(t, "appended body", body(t, last)["note"], any("done"))
}

// txRollback: whatever run does with the composed transaction, it ends
// rolled back, and nothing of it remains: no settlement, no execution, no
// task, no event; the leases it named are still held.
func (s *suite) txRollback(t *testing.T, b *bundle, run runTx) {
	step, flaky := twoSteps(t, b)
	before := endOfLog(t, b)
	if err := run(b.ctx, composed(t, b, step, flaky)); err != nil {
		t.Fatal(err)
	}
	for _, task := range []*backstop.Task{step, flaky} {
		got := b.get(task.ID)
		eq(t, task.ID+" state", got.State, backstop.StateRunning)
		eq(t, task.ID+" execution", got.ExecutionID, task.ExecutionID)
		eq(t, task.ID+" executions", len(got.Executions), 0)
	}
	for _, id := range []string{"next", "next2"} {
		if _, err := b.c.Get(b.ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("task %s of a rolled-back transaction: %v", id, err)
		}
	}
	// The store writes on (on SQLite: the writer connection was handed
	// back) and the leases are as they were.
	b.enqueue(backstop.EnqueueParams{ID: "marker", Queue: "other", Kind: "k"})
	for _, e := range follow(t, b, before, func(e bt.Event) bool { return e.Subject == "marker" }) {
		if composedEvent(e) {
			t.Fatalf("event of a rolled-back transaction: %s of %s", e.Type, e.Subject)
		}
	}
	eq(t, "settle after rollback", settle(t, b, store.Settlement{TaskID: step.ID, ExecutionID: step.ExecutionID,
		Outcome: bt.OutcomeSucceeded, FinishedAt: b.clock.Now(), State: bt.StateSucceeded}), []bool{true})
}

// composedEvent reports an event composed's transaction writes.
func composedEvent(e bt.Event) bool {
	switch e.Subject {
	case "step":
		return e.Type == "task.started" || e.Type == "task.succeeded" || e.Type == "test.step_done"
	case "flaky":
		return e.Type == "task.started" || e.Type == "task.failed" || e.Type == "task.retry_scheduled"
	case "next", "next2":
		return true
	}
	return false
}

// endOfLog is the cursor after every event final now (on Postgres the
// horizon is the cluster's: events of this test committed just before may
// still come after it).
func endOfLog(t *testing.T, b *bundle) string {
	t.Helper()
	after := ""
	for {
		p, err := b.store.ReadEvents(b.ctx, store.EventQuery{After: after, Limit: store.MaxEventLimit})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Events) == 0 {
			return p.Next
		}
		after = p.Next
	}
}

// follow reads the log after the cursor until an event satisfies until,
// and returns every event read, checking their cursors only go forward.
func follow(t *testing.T, b *bundle, after string, until func(bt.Event) bool) []bt.Event {
	t.Helper()
	var got []bt.Event
	testwait.For(t, "the log to reach the awaited event", func() bool {
		p, err := b.store.ReadEvents(b.ctx, store.EventQuery{After: after, Limit: store.MaxEventLimit})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.Events...)
		after = p.Next
		for _, e := range p.Events {
			if until(e) {
				return true
			}
		}
		return false
	})
	checkForward(t, got)
	return got
}

func checkForward(t *testing.T, evs []bt.Event) {
	t.Helper()
	var last store.Cursor
	for i, e := range evs {
		c, err := store.ParseCursor(e.Cursor)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && !last.Less(c) {
			t.Fatalf("cursor went back: %s after %s", e.Cursor, last)
		}
		last = c
	}
}

// txFollower: a follower reading by cursor while a composed transaction is
// open — and while a later transaction commits beside it, where the driver
// lets one (Postgres; SQLite's one writer makes it wait) — sees every event
// of both once the transaction commits: it is never led past the open
// transaction's events.
func (s *suite) txFollower(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	step, flaky := twoSteps(t, b)
	after := endOfLog(t, b)
	inside, release := make(chan struct{}), make(chan struct{})
	txDone, otherDone := make(chan error, 1), make(chan error, 1)
	var releaseOnce sync.Once
	end := func() { releaseOnce.Do(func() { close(release) }) }
	defer end() // a failing test ends the transaction too
	go func() {
		do := composed(t, b, step, flaky)
		txDone <- b.store.InTx(b.ctx, func(tx store.Tx) error {
			if err := do(tx); err != nil {
				return err
			}
			close(inside)
			<-release
			return nil
		})
	}()
	select {
	case <-inside:
	case err := <-txDone:
		t.Fatalf("InTx ended early: %v", err)
	}
	go func() {
		_, err := b.store.Enqueue(b.ctx, []*bt.Task{newTask(b, "beside", "other")}, store.EnqueueOpts{})
		otherDone <- err
	}()
	if b.store.Features().ConcurrentWriters {
		// The later transaction commits while ours is open: its events
		// come after ours in the log, and a read now must not serve them
		// (it would lead the follower past ours).
		if err := <-otherDone; err != nil {
			t.Fatal(err)
		}
	}
	var seen []bt.Event
	for range 3 {
		p, err := b.store.ReadEvents(b.ctx, store.EventQuery{After: after, Limit: store.MaxEventLimit})
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, p.Events...)
		after = p.Next
	}
	for _, e := range seen {
		if composedEvent(e) {
			t.Fatalf("event %s of %s served before its transaction committed", e.Type, e.Subject)
		}
	}
	end()
	if err := <-txDone; err != nil {
		t.Fatal(err)
	}
	if !b.store.Features().ConcurrentWriters {
		if err := <-otherDone; err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int{"task.succeeded step": 1, "test.step_done step": 1, "task.enqueued next": 1,
		"task.enqueued next2": 1, "task.failed flaky": 1, "task.enqueued beside": 1}
	counted := func() map[string]int {
		got := map[string]int{}
		for _, e := range seen {
			if k := e.Type + " " + e.Subject; want[k] > 0 {
				got[k]++
			}
		}
		return got
	}
	testwait.For(t, "the follower to read both transactions' events", func() bool {
		p, err := b.store.ReadEvents(b.ctx, store.EventQuery{After: after, Limit: store.MaxEventLimit})
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, p.Events...)
		after = p.Next
		return len(counted()) == len(want)
	})
	checkForward(t, seen)
	eq(t, "events seen", counted(), want)
}
