package pgstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// The store's own transaction (InTx: a workflow step's settle, whose plan
// enqueues the next steps; Store.WritePlan: a run's start) wakes this
// process's workers in-process once its COMMIT succeeded, as Store.Enqueue
// does: when InTx returns, the queue is on a channel that only the process
// itself feeds (no LISTEN behind it); on main it never got there. A plan
// that fails at its COMMIT wakes nobody. On a Wakeups channel the
// notification's copy that follows through the server is not delivered a
// second time, and after a failed commit nothing stays expected: a
// notification of the same queue from outside still arrives.
func TestOwnTxWakesInProcess(t *testing.T) {
	b := setup(t)
	s, ctx := b.store, t.Context()
	local, stop := s.LocalWakeups()
	defer stop()
	wake := s.Wakeups(ctx)
	prefix := "txwake-" + newTask("").ID + "-"
	// next is the next of this test's queues on wake, waiting at most
	// wait (other tests' stores notify on the same server).
	next := func(wait time.Duration) (string, bool) {
		timeout := time.After(wait)
		for {
			select {
			case q := <-wake:
				if strings.HasPrefix(q, prefix) {
					return strings.TrimPrefix(q, prefix), true
				}
			case <-timeout:
				return "", false
			}
		}
	}
	woken := func(what, want string) {
		t.Helper()
		select {
		case q := <-local:
			if q != prefix+want {
				t.Fatalf("%s woke %q in process, want %q", what, q, prefix+want)
			}
		default:
			t.Fatalf("%s returned without waking %s in process", what, want)
		}
		select {
		case q := <-local:
			t.Fatalf("%s woke %q in process as well", what, q)
		default:
		}
		if q, ok := next(10 * time.Second); !ok || q != want {
			t.Fatalf("%s: Wakeups got %q (%v), want %s once", what, q, ok, want)
		}
	}

	// A plan held for the COMMIT in InTx (a step settle's: pipeTx.holdForCommit).
	held := newTask(prefix + "held")
	if err := s.InTx(ctx, func(tx store.Tx) error {
		_, err := tx.WritePlan(ctx, store.PlanWrite{Tasks: []*bt.Task{held}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	woken("InTx with a held plan", "held")

	// An enqueue in InTx (its wake-up after the COMMIT too).
	if err := s.InTx(ctx, func(tx store.Tx) error {
		_, err := tx.Enqueue(ctx, []*bt.Task{newTask(prefix + "enq")}, store.EnqueueOpts{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	woken("InTx with an enqueue", "enq")

	// Store.WritePlan (a run's start: one pipeline with its COMMIT).
	if _, err := s.WritePlan(ctx, store.PlanWrite{Tasks: []*bt.Task{newTask(prefix + "start")}}); err != nil {
		t.Fatal(err)
	}
	woken("Store.WritePlan", "start")

	// A held plan failing at the COMMIT (a taken id): nothing woken, and
	// nothing left expected.
	taken := newTask(prefix + "held")
	taken.ID = held.ID
	err := s.InTx(ctx, func(tx store.Tx) error {
		_, err := tx.WritePlan(ctx, store.PlanWrite{Tasks: []*bt.Task{taken}})
		return err
	})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a held plan with a taken id: %v, want ErrConflict", err)
	}
	select {
	case q := <-local:
		t.Fatalf("a failed commit woke %q in process", q)
	default:
	}
	if _, err := s.Pool().Exec(ctx, `SELECT pg_notify('backstop_wakeup', $1)`, prefix+"held"); err != nil {
		t.Fatal(err)
	}
	if q, ok := next(10 * time.Second); !ok || q != "held" {
		t.Fatalf("after a failed commit, a notification from outside woke %q (%v), want held", q, ok)
	}
	// No copy of any of the above comes late: the marker is the next.
	if _, err := s.Pool().Exec(ctx, `SELECT pg_notify('backstop_wakeup', $1)`, prefix+"marker"); err != nil {
		t.Fatal(err)
	}
	if q, ok := next(10 * time.Second); !ok || q != "marker" {
		t.Fatalf("woke %q (%v) before the marker: a notification's copy delivered again", q, ok)
	}
}
