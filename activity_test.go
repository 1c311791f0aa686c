package backstop

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testclock"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlitestore"
)

// Activity counts the current minute from the store on every call and
// keeps a closed minute's counts: once read, a closed minute is not read
// again (a success written afterwards with a time in it does not show).
func TestActivityKeepsClosedMinutes(t *testing.T) {
	ctx := context.Background()
	s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "backstop.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 24, 12, 0, 5, 0, time.UTC)
	clk := testclock.At(start)
	c, err := NewClient(s, &Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	// succeed runs one task to success, finished at.
	succeed := func(at time.Time) {
		t.Helper()
		if _, err := c.Enqueue(ctx, EnqueueParams{Queue: "q", Kind: "k"}); err != nil {
			t.Fatal(err)
		}
		got, err := s.Claim(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Max: 1, Now: clk.Now(), Lease: time.Minute})
		if err != nil || len(got) != 1 {
			t.Fatalf("claim: %v %v", got, err)
		}
		if _, err := s.Settle(ctx, []store.Settlement{{TaskID: got[0].ID, ExecutionID: got[0].ExecutionID,
			Outcome: bt.OutcomeSucceeded, FinishedAt: at, State: bt.StateSucceeded}}); err != nil {
			t.Fatal(err)
		}
	}
	succeededIn := func(minute time.Time) int {
		t.Helper()
		ms, err := c.Activity(ctx, 5)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.Minute.Equal(minute) {
				return m.Succeeded
			}
		}
		t.Fatalf("minute %s not in %+v", minute, ms)
		return 0
	}
	m0 := start.Truncate(time.Minute)
	succeed(start)
	if n := succeededIn(m0); n != 1 {
		t.Fatalf("the current minute: %d, want 1", n)
	}
	// Still the current minute: read again from the store.
	succeed(start.Add(time.Second))
	if n := succeededIn(m0); n != 2 {
		t.Fatalf("the current minute again: %d, want 2", n)
	}
	// Two minutes on, m0 is closed: read once, then kept.
	clk.Advance(2 * time.Minute)
	if n := succeededIn(m0); n != 2 {
		t.Fatalf("m0 closed: %d, want 2", n)
	}
	succeed(start.Add(2 * time.Second)) // a late row in m0
	if n := succeededIn(m0); n != 2 {
		t.Fatalf("m0 was read again: %d, want the kept 2", n)
	}
	if _, err := c.Activity(ctx, MaxActivityMinutes+1); err == nil {
		t.Fatal("a window over the bound was accepted")
	}
}
