package pgstore_test

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/probe"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

// TestClaimCursorBehind: once a claim advanced the cursor, a task that
// becomes claimable behind it (a higher priority; an earlier run_at) waits
// for the next full pick, which the period brings: it is claimed then,
// first, in priority order within that pick. The cursor pick after the
// full pick goes on from the full pick's last task. The same on the
// limited claim (a queue that may have limits and has none).
func TestClaimCursorBehind(t *testing.T) {
	for _, limited := range []bool{false, true} {
		t.Run("limited="+strconv.FormatBool(limited), func(t *testing.T) {
			b := setup(t)
			s := b.store
			claimN := func(n int) []string {
				t.Helper()
				got, err := s.Claim(t.Context(), store.ClaimParams{Queue: "q", WorkerID: "w", Max: n, Now: t0,
					Lease: time.Minute, Limited: limited})
				if err != nil {
					t.Fatal(err)
				}
				return ids(got)
			}
			a := make([]*bt.Task, 6)
			for i := range a {
				a[i] = newTask("q")
				a[i].RunAt = t0.Add(time.Duration(i-10) * time.Second)
			}
			enqueue(t, s, store.EnqueueOpts{}, a...)
			if g, w := claimN(2), ids(a[:2]); !slices.Equal(g, w) {
				t.Fatalf("first claim = %v, want %v", g, w)
			}
			if prio, runAt, id, ok := s.ClaimCursor("q"); !ok || prio != 0 || !runAt.Equal(a[1].RunAt) || id != a[1].ID {
				t.Fatalf("cursor = %d %v %s %t, want at %s", prio, runAt, id, ok, a[1].ID)
			}

			high := newTask("q")
			high.Priority = 5
			early := newTask("q")
			early.RunAt = t0.Add(-time.Hour)
			enqueue(t, s, store.EnqueueOpts{}, high, early)
			if g, w := claimN(2), ids(a[2:4]); !slices.Equal(g, w) {
				t.Fatalf("claim within the period = %v, want %v (the cursor's next; behind it waits)", g, w)
			}
			s.ExpireClaimCursors()
			if g, w := claimN(2), []string{high.ID, early.ID}; !slices.Equal(g, w) {
				t.Fatalf("claim after the period = %v, want %v (the full pick, in priority order)", g, w)
			}
			if g, w := claimN(10), ids(a[4:]); !slices.Equal(g, w) {
				t.Fatalf("last claim = %v, want %v", g, w)
			}
			if g := claimN(10); len(g) != 0 {
				t.Fatalf("claim of an empty queue = %v", g)
			}
		})
	}
}

// TestClaimCursorShort: a cursor pick that comes back short is filled by a
// full pick in the same claim, so tasks behind the cursor are claimed
// without waiting for the period when the cursor's priority has run out:
// a higher and a lower priority enqueued after the cursor advanced.
func TestClaimCursorShort(t *testing.T) {
	b := setup(t)
	s := b.store
	a, c := newTask("q"), newTask("q")
	a.RunAt = t0.Add(-time.Second)
	enqueue(t, s, store.EnqueueOpts{}, a, c)
	if g, w := ids(claim(t, s, "q", 2, t0)), []string{a.ID, c.ID}; !slices.Equal(g, w) {
		t.Fatalf("first claim = %v, want %v", g, w)
	}
	high, low, next := newTask("q"), newTask("q"), newTask("q")
	high.Priority, low.Priority = 3, -3
	enqueue(t, s, store.EnqueueOpts{}, high, low, next)
	if g, w := ids(claim(t, s, "q", 10, t0)), []string{high.ID, next.ID, low.ID}; !slices.Equal(g, w) {
		t.Fatalf("claim = %v, want %v", g, w)
	}
	// Kinds are a claim shape of their own: its first claim is a full pick.
	other := newTask("q")
	other.Priority = 9
	enqueue(t, s, store.EnqueueOpts{}, other)
	got, err := s.Claim(t.Context(), store.ClaimParams{Queue: "q", Kinds: []string{"k"}, WorkerID: "w", Max: 1, Now: t0, Lease: time.Minute})
	if err != nil || len(got) != 1 || got[0].ID != other.ID {
		t.Fatalf("claim with kinds = %v, %v; want %s", ids(got), err, other.ID)
	}
}

var buffersRe = regexp.MustCompile(`Buffers: shared (?:hit=(\d+))?\s*(?:read=(\d+))?`)

// TestClaimCursorPickBehindSnapshot: while a REPEATABLE READ transaction
// holds its snapshot, the entries of the tasks claimed since stay at the
// head of the claim index; the pick from the head visits every one of
// them, the cursor pick starts past them (an index condition on run_at and
// id). Buffers, not times: the full pick's index scan touches several
// times as many.
func TestClaimCursorPickBehindSnapshot(t *testing.T) {
	b := setup(t)
	s := b.store
	ctx := t.Context()
	tasks := make([]*bt.Task, 3000)
	for i := range tasks {
		tasks[i] = newTask("q")
		tasks[i].RunAt = t0.Add(time.Duration(i-len(tasks)) * time.Millisecond)
	}
	for chunk := range slices.Chunk(tasks, 1000) {
		enqueue(t, s, store.EnqueueOpts{}, chunk...)
	}
	holder, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := holder.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := holder.QueryRow(ctx, "SELECT count(*) FROM backstop_tasks").Scan(&n); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if got := claim(t, s, "q", 500, t0); len(got) != 500 {
			t.Fatalf("claimed %d, want 500", len(got))
		}
	}
	prio, runAt, id, ok := s.ClaimCursor("q")
	if !ok || id != tasks[1999].ID {
		t.Fatalf("cursor at %s (%t), want %s", id, ok, tasks[1999].ID)
	}
	buffers := func(q string, args ...any) (int, string) {
		t.Helper()
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		text := strings.Join(plan, "\n")
		// The buffers of the scan of the claim index (the nodes above it
		// lock the rows it returns, as many for both picks).
		_, scan, _ := strings.Cut(text, "Index Scan using backstop_tasks_claim")
		m := buffersRe.FindStringSubmatch(scan)
		if m == nil {
			t.Fatalf("no scan of the claim index with its buffers in\n%s", text)
		}
		hit, _ := strconv.Atoi(m[1])
		read, _ := strconv.Atoi(m[2])
		return hit + read, text
	}
	full, fullPlan := buffers(pgstore.ClaimPickSQL(), "q", t0, 100)
	cur, curPlan := buffers(pgstore.ClaimCursorPickSQL(), "q", t0, 100, prio, runAt, id)
	t.Logf("full pick: %d buffers\n%s\ncursor pick: %d buffers\n%s", full, fullPlan, cur, curPlan)
	if !strings.Contains(curPlan, "backstop_tasks_claim") || !regexp.MustCompile(`Index Cond: .*ROW\(run_at, id\) >`).MatchString(curPlan) {
		t.Errorf("the cursor pick does not start in the claim index at its position:\n%s", curPlan)
	}
	if full < 5*cur {
		t.Errorf("full pick %d buffers, cursor pick %d: want the full pick to walk the dead head", full, cur)
	}
}

// nullSink is a probe.Sink that keeps nothing: the claims' records are
// read from the probe.Claim itself.
type nullSink struct{}

func (nullSink) Claimed(*probe.Claim)                    {}
func (nullSink) Task(string, probe.TaskStage, time.Time) {}

// TestClaimAfterAShortClaimIsOnePick: a claim that came back short (the
// queue caught up) makes the next claim a pick from the head alone, one
// statement: a cursor pick first would come back short as well, and the
// tasks it took would wait for the pick from the head to commit. A claim
// that came back full makes the next one a cursor pick again. The
// statements are read from the stage probe (internal/probe).
func TestClaimAfterAShortClaimIsOnePick(t *testing.T) {
	b := setup(t)
	s := b.store
	claimP := func(n int) ([]string, []string) {
		t.Helper()
		ctx, pc := probe.StartClaim(t.Context(), nullSink{})
		got, err := s.Claim(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Max: n, Now: t0, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, p := range pc.Picks() {
			kinds = append(kinds, p.Kind)
		}
		return ids(got), kinds
	}
	a := make([]*bt.Task, 3)
	for i := range a {
		a[i] = newTask("q")
		a[i].RunAt = t0.Add(time.Duration(i-10) * time.Second)
	}
	enqueue(t, s, store.EnqueueOpts{}, a...)
	if g, k := claimP(2); !slices.Equal(g, ids(a[:2])) || !slices.Equal(k, []string{"head"}) {
		t.Fatalf("first claim = %v by %v, want %v by a pick from the head", g, k, ids(a[:2]))
	}
	// Full: the next claim starts at the cursor; short, so the head fills.
	if g, k := claimP(2); !slices.Equal(g, ids(a[2:])) || !slices.Equal(k, []string{"cursor", "head"}) {
		t.Fatalf("claim after a full one = %v by %v, want %v by the cursor pick, then the head", g, k, ids(a[2:]))
	}
	// Short: the next claim is one pick from the head.
	next := newTask("q")
	enqueue(t, s, store.EnqueueOpts{}, next)
	if g, k := claimP(2); !slices.Equal(g, []string{next.ID}) || !slices.Equal(k, []string{"head"}) {
		t.Fatalf("claim after a short one = %v by %v, want %s by one pick from the head", g, k, next.ID)
	}
	// From the head again, full this time: the cursor pick comes back.
	more := make([]*bt.Task, 4)
	for i := range more {
		more[i] = newTask("q")
	}
	enqueue(t, s, store.EnqueueOpts{}, more...)
	if g, k := claimP(2); !slices.Equal(g, ids(more[:2])) || !slices.Equal(k, []string{"head"}) {
		t.Fatalf("claim = %v by %v, want %v by one pick from the head", g, k, ids(more[:2]))
	}
	if g, k := claimP(2); !slices.Equal(g, ids(more[2:])) || !slices.Equal(k, []string{"cursor"}) {
		t.Fatalf("claim after a full one = %v by %v, want %v by the cursor pick alone", g, k, ids(more[2:]))
	}
}
