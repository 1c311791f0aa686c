package pgstore_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

// A single enqueue is two round trips: BEGIN with its INSERT, and the
// wake-up with COMMIT (it was four: begin, insert, notify, commit).
func TestSingleEnqueueTwoRoundTrips(t *testing.T) {
	s, rt := tracedStore(t)
	enqueue(t, s, store.EnqueueOpts{}, newTask("q")) // prepares the statements
	for range 3 {
		n0 := rt.trips()
		enqueue(t, s, store.EnqueueOpts{}, newTask("q"))
		if n := rt.trips() - n0; n != 2 {
			t.Fatalf("one enqueue took %d round trips, want 2", n)
		}
	}
	// A batch written by COPY: BEGIN with its event row, the COPY, and
	// the wake-up with COMMIT.
	n0, c0 := rt.trips(), rt.copies.Load()
	enqueue(t, s, store.EnqueueOpts{}, plainTasks("copied", 100)...)
	if n, c := rt.trips()-n0, rt.copies.Load()-c0; n != 2 || c != 1 {
		t.Fatalf("a copied batch took %d round trips and %d COPYs, want 2 and 1", n, c)
	}
	if n := countTasks(t, s); n != 104 {
		t.Fatalf("%d tasks, want 104", n)
	}
}

// The Store's own Enqueue wakes its Wakeups channels as soon as it
// returns, without waiting for the notification to cross the server; the
// notification's copy is not delivered a second time.
func TestEnqueueWakesInProcess(t *testing.T) {
	b := setup(t)
	s := b.store
	wake := s.Wakeups(t.Context())
	// Other tests' stores notify on the same server: only this test's
	// queues count.
	prefix := "inproc-" + newTask("").ID + "-"
	next := func(wait time.Duration) (string, bool) {
		timeout := time.After(wait)
		for {
			select {
			case q := <-wake:
				if strings.HasPrefix(q, prefix) {
					return q, true
				}
				continue
			default:
			}
			select {
			case q := <-wake:
				if strings.HasPrefix(q, prefix) {
					return q, true
				}
			case <-timeout:
				return "", false
			}
		}
	}
	for i := range 20 {
		q := fmt.Sprintf("%s%d", prefix, i)
		enqueue(t, s, store.EnqueueOpts{}, newTask(q))
		got, ok := next(0) // already there: no waiting
		if !ok {
			t.Fatalf("enqueue %d returned before waking %s", i, q)
		}
		if got != q {
			t.Fatalf("woke %q, want %q", got, q)
		}
	}
	// A task that is not claimable yet wakes nobody.
	later := newTask(prefix + "later")
	later.State, later.RunAt = "scheduled", later.RunAt.Add(time.Hour)
	enqueue(t, s, store.EnqueueOpts{}, later)
	if got, ok := next(time.Second); ok {
		t.Fatalf("a second wake-up of %q: the notification's copy was delivered again", got)
	}
	// Another process's enqueue (a notification from a backend this
	// Store did not commit on) still arrives through LISTEN.
	if _, err := s.Pool().Exec(t.Context(), `SELECT pg_notify('backstop_wakeup', $1)`, prefix+"elsewhere"); err != nil {
		t.Fatal(err)
	}
	if got, ok := next(10 * time.Second); !ok || got != prefix+"elsewhere" {
		t.Fatalf("woke %q (%v), want the notification from outside Enqueue", got, ok)
	}
}
