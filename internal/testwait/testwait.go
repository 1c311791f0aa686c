// Package testwait is the tests' one way to wait for something to become
// true: a condition polled, from every few milliseconds to every 50, until
// it holds or a generous bound passes (only a broken program reaches it).
// Tests wait on conditions and signals, never on a fixed sleep that
// assumes how long something takes.
package testwait

import (
	"testing"
	"time"
)

// Bound is how long For waits before it fails the test.
const Bound = 2 * time.Minute

// For waits until cond holds, failing t (naming what it waited for) after
// Bound.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Within(t, Bound, what, cond)
}

// Within is For with another bound, for a wait on much work (thousands of
// tasks handled under the race detector on a busy machine).
func Within(t testing.TB, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", bound, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}
