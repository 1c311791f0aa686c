package pgstore_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
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
	// A batch written by COPY and nothing else: BEGIN with its event row
	// and its wake-up, then the COPY with the COMMIT.
	n0, c0 := rt.trips(), rt.copies.Load()
	enqueue(t, s, store.EnqueueOpts{}, plainTasks("copied", 100)...)
	if n, c := rt.trips()-n0, rt.copies.Load()-c0; n != 1 || c != 1 {
		t.Fatalf("a copied batch took %d round trips besides %d COPYs, want 1 and 1", n, c)
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

// A copied batch that carries its COMMIT wakes its pending queues once, in
// process, and the notifications' copies are not delivered again; one
// whose COPY fails (a taken id) writes nothing, wakes nobody, and leaves
// nothing expected: a later notification of the same queue from outside
// Enqueue still arrives.
func TestCopiedBatchWakesOnce(t *testing.T) {
	b := setup(t)
	s := b.store
	wake := s.Wakeups(t.Context())
	prefix := "copywake-" + newTask("").ID + "-"
	woken := func(wait time.Duration) []string {
		var got []string
		timeout := time.After(wait)
		for {
			select {
			case q := <-wake:
				if strings.HasPrefix(q, prefix) {
					got = append(got, strings.TrimPrefix(q, prefix))
				}
			case <-timeout:
				return got
			}
		}
	}
	batch := func(name string) []*bt.Task {
		ts := plainTasks(prefix+name, 100)
		for i, tk := range ts {
			tk.Queue = prefix + []string{"a", "b", "later"}[i%3]
			if i%3 == 2 {
				tk.State, tk.RunAt = bt.StateScheduled, tk.RunAt.Add(time.Hour)
			}
		}
		return ts
	}
	enqueue(t, s, store.EnqueueOpts{}, batch("first")...)
	if got := woken(2 * time.Second); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("a copied batch woke %q, want [a b] once each", got)
	}

	refused := batch("refused")
	refused[50].ID = plainTasks(prefix+"first", 1)[0].ID
	if _, err := s.Enqueue(t.Context(), refused, store.EnqueueOpts{}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a copied batch holding a taken id: %v, want ErrConflict", err)
	}
	for _, q := range []string{"a", "b"} {
		if _, err := s.Pool().Exec(t.Context(), `SELECT pg_notify('backstop_wakeup', $1)`, prefix+q); err != nil {
			t.Fatal(err)
		}
	}
	if got := woken(3 * time.Second); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("after a refused batch, notifications from outside woke %q, want [a b]", got)
	}
	var n int
	if err := s.Pool().QueryRow(t.Context(), `SELECT count(*) FROM backstop_tasks WHERE id LIKE $1`, prefix+"refused%").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the refused batch wrote %d tasks", n)
	}
}
