package pgstore

import (
	"slices"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// TestClaimCursorPeriod: a cursor is trusted for its period after the last
// full pick, or ten times as long as that pick took when that is longer;
// a full pick sets the position (back to a higher priority too), a cursor
// pick only advances it.
func TestClaimCursorPeriod(t *testing.T) {
	c := &claimCursor{}
	if _, _, _, ok := c.position(time.Second); ok {
		t.Fatal("a cursor without a position is trusted")
	}
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	a := &bt.Task{ID: "a", RunAt: at}
	b := &bt.Task{ID: "b", RunAt: at}
	high := &bt.Task{ID: "c", Priority: 5, RunAt: at.Add(time.Hour)}
	pickNote{c: c, full: true, ended: time.Now(), took: time.Millisecond, last: b}.record()
	if _, _, id, ok := c.position(time.Second); !ok || id != "b" {
		t.Fatalf("after a full pick: %s %t, want b", id, ok)
	}
	pickNote{c: c, last: a}.record()
	if _, _, id, _ := c.position(time.Second); id != "b" {
		t.Fatalf("a cursor pick moved the position back to %s", id)
	}
	pickNote{c: c, full: true, ended: time.Now(), took: time.Millisecond, last: high}.record()
	if prio, _, id, _ := c.position(time.Second); id != "c" || prio != 5 {
		t.Fatalf("a full pick did not set the position: %d %s", prio, id)
	}
	c.fullAt = time.Now().Add(-1100 * time.Millisecond)
	if _, _, _, ok := c.position(time.Second); ok {
		t.Fatal("trusted past its period")
	}
	c.fullTook = 200 * time.Millisecond
	if _, _, _, ok := c.position(time.Second); !ok {
		t.Fatal("a full pick of 200 ms does not stretch the period to 2 s")
	}
	c.fullAt = time.Now().Add(-2100 * time.Millisecond)
	if _, _, _, ok := c.position(time.Second); ok {
		t.Fatal("trusted past ten times its full pick")
	}
}

// TestNextPlanPeriod: a claim statement is first kept for a fifth of the
// claim plan period, then for the period.
func TestNextPlanPeriod(t *testing.T) {
	const max = 5 * time.Second
	var got []time.Duration
	p := time.Duration(0)
	for range 4 {
		p = nextPlanPeriod(p, max)
		got = append(got, p)
	}
	want := []time.Duration{time.Second, max, max, max}
	if !slices.Equal(got, want) {
		t.Fatalf("periods %v, want %v", got, want)
	}
}
