package storetest

import (
	"fmt"
	"maps"
	"reflect"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// countsOf is CountByQueue's counts as queue → state → n and queue →
// dead-letter status → n.
func countsOf(t *testing.T, b *bundle) (map[string]map[bt.State]int, map[string]map[bt.DLQStatus]int) {
	t.Helper()
	qs, err := b.store.(store.APIStore).CountByQueue(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	tasks, dead := map[string]map[bt.State]int{}, map[string]map[bt.DLQStatus]int{}
	for _, q := range qs {
		if len(q.Capped) > 0 {
			t.Fatalf("%s: capped %v", q.Queue, q.Capped)
		}
		tasks[q.Queue], dead[q.Queue] = maps.Clone(q.Counts), maps.Clone(q.DeadLetters)
	}
	return tasks, dead
}

// rowCounts counts the tasks row by row, from a listing of every state.
func rowCounts(t *testing.T, b *bundle) (map[string]map[bt.State]int, map[string]map[bt.DLQStatus]int) {
	t.Helper()
	ts, err := b.store.List(b.ctx, store.ListFilter{States: bt.States, Limit: 10_000, WithoutPayload: true})
	if err != nil {
		t.Fatal(err)
	}
	tasks, dead := map[string]map[bt.State]int{}, map[string]map[bt.DLQStatus]int{}
	for _, x := range ts {
		if tasks[x.Queue] == nil {
			tasks[x.Queue], dead[x.Queue] = map[bt.State]int{}, map[bt.DLQStatus]int{}
		}
		tasks[x.Queue][x.State]++
		if x.State == bt.StateDead && x.DLQStatus != "" {
			dead[x.Queue][x.DLQStatus]++
		}
	}
	return tasks, dead
}

// testCountsKept: CountByQueue's counts equal a count of the rows after
// every kind of write — enqueue, claim, heartbeat, retry, success,
// death, cancel, replay, discard, resolve, purge, retention — before and
// after the counts are folded (store.CountKeeper), and a reconciliation
// then finds nothing to correct: every write was counted.
func (s *suite) testCountsKept(t *testing.T) {
	t.Parallel()
	b := s.setup(t, &backstop.Config{PurgeFloor: time.Hour, Retention: backstop.RetentionConfig{
		Succeeded: time.Hour, Canceled: time.Hour, DeadLetters: time.Hour}})
	keeper := b.store.(store.CountKeeper)
	check := func(step string) {
		t.Helper()
		for _, fold := range []bool{false, true} {
			if fold {
				if _, err := keeper.FoldCounts(b.ctx); err != nil {
					t.Fatal(err)
				}
			}
			tasks, dead := countsOf(t, b)
			wantTasks, wantDead := rowCounts(t, b)
			if !reflect.DeepEqual(tasks, wantTasks) || !reflect.DeepEqual(dead, wantDead) {
				t.Fatalf("%s (folded %v): counts %v %v, rows %v %v", step, fold, tasks, dead, wantTasks, wantDead)
			}
			groupsAsRows(t, b, fmt.Sprintf("%s (folded %v)", step, fold))
		}
	}
	check("empty")
	for i := range 12 {
		p := backstop.EnqueueParams{ID: fmt.Sprintf("ck-%02d", i), Queue: []string{"a", "b", "c"}[i%3], Kind: "k", MaxAttempts: 2}
		if i%4 == 3 {
			p.Delay = time.Hour
		}
		b.enqueue(p)
	}
	check("enqueued")
	got := claim(t, b, "a", 3)
	check("claimed")
	if _, err := b.store.Heartbeat(b.ctx, []store.Beat{{TaskID: got[0].ID, ExecutionID: got[0].ExecutionID}}, b.clock.Now(), b.clock.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	check("heartbeat")
	b.succeed(got[0])
	settle(t, b, store.Settlement{TaskID: got[1].ID, ExecutionID: got[1].ExecutionID, Outcome: bt.OutcomeTransientError,
		Error: "again", FinishedAt: b.clock.Now(), State: bt.StatePending, RunAt: b.clock.Now()})
	check("succeeded and retried")
	// Successes settled as one batch over two queues, a success in a batch
	// with a retry (settled one by one), and a success of a task never
	// claimed: each way a task becomes succeeded.
	for i, q := range []string{"d", "d", "d", "e", "e"} {
		b.enqueue(backstop.EnqueueParams{ID: fmt.Sprintf("ck-%s-%d", q, i), Queue: q, Kind: "k", MaxAttempts: 2})
	}
	d, e := claim(t, b, "d", 3), claim(t, b, "e", 1)
	check("claimed in two queues")
	won := func(x *backstop.Task) store.Settlement {
		return store.Settlement{TaskID: x.ID, ExecutionID: x.ExecutionID, Outcome: bt.OutcomeSucceeded,
			FinishedAt: b.clock.Now(), State: bt.StateSucceeded}
	}
	settle(t, b, won(d[0]), won(e[0]))
	check("successes of two queues in one batch")
	settle(t, b, won(d[1]), store.Settlement{TaskID: d[2].ID, ExecutionID: d[2].ExecutionID, Outcome: bt.OutcomeTransientError,
		Error: "again", FinishedAt: b.clock.Now(), State: bt.StatePending, RunAt: b.clock.Now()})
	check("a success and a retry in one batch")
	settle(t, b, store.Settlement{TaskID: "ck-e-4", Outcome: bt.OutcomeSucceeded, FinishedAt: b.clock.Now(), State: bt.StateSucceeded})
	check("a success of a task never claimed")
	if _, err := b.c.Cancel(b.ctx, "ck-01"); err != nil {
		t.Fatal(err)
	}
	check("canceled")
	b.kill("b", "broken")
	b.kill("c", "broken")
	check("dead")
	b.enqueue(backstop.EnqueueParams{ID: "ck-x1", Queue: "b", Kind: "k"})
	b.enqueue(backstop.EnqueueParams{ID: "ck-x2", Queue: "c", Kind: "k"})
	b.kill("b", "broken differently")
	b.kill("c", "")
	check("dead of other errors")
	if _, err := b.c.Replay(b.ctx, backstop.ReplayParams{ID: "ck-04", Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.Discard(b.ctx, backstop.DiscardParams{ID: "ck-10", Reason: "no", Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.Resolve(b.ctx, backstop.ResolveParams{ID: "ck-05", Note: "by hand", Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	check("replayed, discarded, resolved")
	b.clock.Advance(2 * time.Hour)
	if n, err := b.c.PurgeDLQ(b.ctx, backstop.PurgeParams{OlderThan: time.Hour, Statuses: []backstop.DLQStatus{backstop.DLQDiscarded}}); err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	check("purged")
	if r, err := backstop.Retain(b.ctx, b.c); err != nil {
		t.Fatal(err)
	} else if r.Succeeded+r.Canceled == 0 {
		t.Fatalf("retention deleted nothing: %+v", r)
	}
	check("retention")
	if d, err := keeper.ReconcileCounts(b.ctx); err != nil || d != (store.CountDrift{}) {
		t.Fatalf("reconcile: %+v %v, want nothing to correct", d, err)
	}
	check("reconciled")
}

// groupsAsRows: the dead letters' groups of the filters whose groups are
// kept (store.GroupsKept: statuses and a queue) equal the groups of the
// same filter read from the rows (a time range that holds every dead
// letter makes the stores group the rows).
func groupsAsRows(t *testing.T, b *bundle, step string) {
	t.Helper()
	reads := b.store.(store.APIStore)
	for _, f := range []store.ListFilter{
		{},
		{DLQStatuses: []bt.DLQStatus{bt.DLQOpen}},
		{DLQStatuses: []bt.DLQStatus{bt.DLQReplayed, bt.DLQDiscarded, bt.DLQResolved}},
		{Queue: "b", DLQStatuses: []bt.DLQStatus{bt.DLQOpen}},
		{Queue: "c"},
		{Queue: "none"},
	} {
		if !store.GroupsKept(f) {
			t.Fatalf("%+v: not a filter of kept groups", f)
		}
		got, err := reads.DLQGroups(b.ctx, f, 20)
		if err != nil {
			t.Fatal(err)
		}
		rows := f
		rows.Until = b.clock.Now().Add(1000 * time.Hour)
		want, err := reads.DLQGroups(b.ctx, rows, 20)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: groups of %+v: kept %+v, rows %+v", step, f, got, want)
		}
	}
}
