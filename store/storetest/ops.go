package storetest

import (
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

// testOps: leader election, retention, statistics, views.
func (s *suite) testOps(t *testing.T) {
	t.Run("LeaderExclusive", s.testLeaderExclusive)
	t.Run("LeaderTakeoverAfterExpiry", s.testLeaderTakeover)
	t.Run("LeaderResign", s.testLeaderResign)
	t.Run("WorkersElectOneLeader", s.testWorkersElectOneLeader)
	t.Run("Retention", s.testRetention)
	t.Run("RetentionKeepsForeverWhenNegative", s.testRetentionKeep)
	t.Run("RetentionNeverTakesOpenDeadLetters", s.testRetentionNeverTakesOpen)
	t.Run("PurgeWhereAndFloor", s.testPurgeWhereAndFloor)
	t.Run("Stats", s.testStats)
	t.Run("Views", s.testViews)
	t.Run("ProbeWrite", s.testProbeWrite)
}

// testProbeWrite: a healthy store passes the write probe, again and again,
// and it leaves nothing behind (a write after it works as before).
func (s *suite) testProbeWrite(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	for range 3 {
		if err := b.store.ProbeWrite(b.ctx); err != nil {
			t.Fatalf("ProbeWrite on a healthy store: %v", err)
		}
	}
	if _, err := b.c.Enqueue(b.ctx, backstop.EnqueueParams{Queue: "probe", Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	if err := b.store.ProbeWrite(b.ctx); err != nil || store.IsUnavailable(err) {
		t.Fatalf("ProbeWrite after a write: %v", err)
	}
}

// testLeaderExclusive: eight candidates race for a free lease; exactly one
// gets it, and a second round (all renewing or taking) changes nothing.
func (s *suite) testLeaderExclusive(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	now := b.clock.Now()
	for round := range 2 {
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []string
		)
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("cand-%d", i)
				ok, err := b.store.TryLead(b.ctx, "maintenance", id, now.Add(time.Duration(round)*time.Second), 15*time.Second)
				if err != nil {
					t.Errorf("%s: %v", id, err)
					return
				}
				if ok {
					mu.Lock()
					winners = append(winners, id)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("round %d: %d winners %v, want exactly one", round, len(winners), winners)
		}
		l, err := b.store.Leader(b.ctx, "maintenance")
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "leader row", l.LeaderID, winners[0])
		eq(t, "elected_at is kept on renewal", l.ElectedAt, now)
		eq(t, "expires_at", l.ExpiresAt, now.Add(time.Duration(round)*time.Second+15*time.Second))
	}
	// Another name is another lease.
	ok, err := b.store.TryLead(b.ctx, "other", "cand-x", now, time.Second)
	if err != nil || !ok {
		t.Fatalf("other lease: %v %v", ok, err)
	}
}

func (s *suite) testLeaderTakeover(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	ttl := 15 * time.Second
	try := func(id string, ok bool) {
		t.Helper()
		got, err := b.store.TryLead(b.ctx, "maintenance", id, b.clock.Now(), ttl)
		if err != nil {
			t.Fatal(err)
		}
		if got != ok {
			t.Fatalf("TryLead(%s) = %v, want %v", id, got, ok)
		}
	}
	try("a", true)
	b.clock.Advance(5 * time.Second)
	try("b", false) // a's lease is live
	try("a", true)  // renewal: expires 15s from now
	b.clock.Advance(14 * time.Second)
	try("b", false)
	b.clock.Advance(2 * time.Second) // a stopped renewing: expired
	try("b", true)
	elected := b.clock.Now()
	try("a", false)
	l, err := b.store.Leader(b.ctx, "maintenance")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "leader", l.LeaderID, "b")
	if d := l.ElectedAt.Sub(elected); d > 0 || d < -time.Second {
		t.Fatalf("elected_at %s, want about %s (b's takeover)", l.ElectedAt, elected)
	}
}

func (s *suite) testLeaderResign(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	now := b.clock.Now()
	lead := func(id string) bool {
		t.Helper()
		ok, err := b.store.TryLead(b.ctx, "maintenance", id, now, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if _, err := b.store.Leader(b.ctx, "maintenance"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("leader of a never-held lease: %v, want ErrNotFound", err)
	}
	if !lead("a") || lead("b") {
		t.Fatal("a should lead, b not")
	}
	// Resigning a lease one does not hold does nothing.
	if err := b.store.ResignLead(b.ctx, "maintenance", "b"); err != nil {
		t.Fatal(err)
	}
	if lead("b") {
		t.Fatal("b took the lease after its own (no-op) resign")
	}
	if err := b.store.ResignLead(b.ctx, "maintenance", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Leader(b.ctx, "maintenance"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("leader after resign: %v, want ErrNotFound", err)
	}
	// No waiting for the hour-long TTL.
	if !lead("b") {
		t.Fatal("b could not take a resigned lease at once")
	}
}

// testWorkersElectOneLeader: two workers on one store, one leads; when it
// stops (resigning), the other takes over.
func (s *suite) testWorkersElectOneLeader(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	cfg := func(id string) *backstop.WorkerConfig {
		return &backstop.WorkerConfig{ID: id, LeaderTTL: 30 * time.Second}
	}
	w1 := b.worker(cfg("w1"), nil)
	w2 := b.worker(cfg("w2"), nil)
	var leader, other *backstop.Worker
	testwait.For(t, "a leader", func() bool {
		switch {
		case w1.IsLeader():
			leader, other = w1, w2
		case w2.IsLeader():
			leader, other = w2, w1
		}
		return leader != nil
	})
	time.Sleep(300 * time.Millisecond) // several election rounds
	if other.IsLeader() {
		t.Fatal("both workers lead")
	}
	l, err := b.store.Leader(b.ctx, backstop.MaintenanceLeadership)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "leader row", l.LeaderID, leader.ID())
	if err := leader.Stop(b.ctx); err != nil {
		t.Fatal(err)
	}
	if leader.IsLeader() {
		t.Fatal("a stopped worker still leads")
	}
	// The TTL is 30s: only the resign lets the other take over this fast.
	testwait.For(t, "the other worker to take over", other.IsLeader)
	l, err = b.store.Leader(b.ctx, backstop.MaintenanceLeadership)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "leader row after handover", l.LeaderID, other.ID())
}

// retentionFixture builds, through the store, in queue "r": three
// succeeded tasks (one with a spilled payload, one with an event), two dead
// letters (d-resolved is then resolved, d-open stays open); in queue
// "other": a canceled task and a pending one.
func retentionFixture(t *testing.T, b *bundle) {
	t.Helper()
	for _, id := range []string{"s1", "s2", "s3", "d-resolved", "d-open"} {
		payload := `{"n":1}`
		if id == "s3" {
			payload = `{"big":"` + strings.Repeat("x", 200) + `"}`
		}
		b.enqueue(backstop.EnqueueParams{ID: id, Queue: "r", Kind: "k", Payload: []byte(payload)})
	}
	b.enqueue(backstop.EnqueueParams{ID: "c1", Queue: "other", Kind: "k"})
	b.enqueue(backstop.EnqueueParams{ID: "p1", Queue: "other", Kind: "k"})
	if _, err := b.c.Cancel(b.ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	now := b.clock.Now()
	claimed, err := b.store.Claim(b.ctx, store.ClaimParams{Queue: "r", WorkerID: "w", Max: 10, Now: now, Lease: time.Minute})
	if err != nil || len(claimed) != 5 {
		t.Fatalf("claim: %d tasks, %v", len(claimed), err)
	}
	var ss []store.Settlement
	for _, c := range claimed {
		st := store.Settlement{TaskID: c.ID, ExecutionID: c.ExecutionID, FinishedAt: now,
			Outcome: bt.OutcomeSucceeded, State: bt.StateSucceeded}
		if strings.HasPrefix(c.ID, "d-") {
			st.Outcome, st.State, st.DeadReason, st.Error = bt.OutcomePermanentError, bt.StateDead, bt.ReasonPermanentError, "nope"
		}
		ss = append(ss, st)
	}
	if _, err := b.store.Settle(b.ctx, ss); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.SetDLQStatus(b.ctx, store.DLQStatusChange{ID: "d-resolved", Status: bt.DLQResolved, Now: now,
		Event: store.NewEvent(now, "task.dlq_resolved", "d-resolved", "", "", "test", []byte(`{}`))}); err != nil {
		t.Fatal(err)
	}
	if err := b.store.AppendEvents(b.ctx, []bt.Event{store.NewEvent(now, "test.note", "s1", "r", "k", "test", []byte(`{}`))}); err != nil {
		t.Fatal(err)
	}
}

func (s *suite) testRetention(t *testing.T) {
	t.Parallel()
	b := s.setup(t, &backstop.Config{InlinePayloadLimit: 64,
		Retention: backstop.RetentionConfig{Succeeded: time.Hour, Canceled: 2 * time.Hour, DeadLetters: 24 * time.Hour}})
	retentionFixture(t, b)
	if got := b.get("s3"); !got.PayloadSpilled {
		t.Fatal("fixture: s3's payload did not spill")
	}
	present := func(want ...string) {
		t.Helper()
		ts, err := b.c.List(b.ctx, backstop.ListParams{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, x := range ts {
			ids = append(ids, x.ID)
		}
		eq(t, "tasks left", strings.Join(ids, ","), strings.Join(want, ","))
	}
	retain := func(want backstop.RetentionResult) {
		t.Helper()
		got, err := backstop.Retain(b.ctx, b.c)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "retention result", got, want)
	}
	all := []string{"c1", "d-open", "d-resolved", "p1", "s1", "s2", "s3"}
	retain(backstop.RetentionResult{})
	present(all...)

	b.clock.Advance(59 * time.Minute)
	retain(backstop.RetentionResult{})
	present(all...)

	b.clock.Advance(2 * time.Minute) // succeeded: past 1h
	retain(backstop.RetentionResult{Succeeded: 3})
	present("c1", "d-open", "d-resolved", "p1")
	for _, id := range []string{"s1", "s3"} {
		if _, err := b.c.Get(b.ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get deleted %s: %v, want ErrNotFound", id, err)
		}
		if ex, err := b.store.Executions(b.ctx, id); err != nil || len(ex) != 0 {
			t.Fatalf("executions of deleted %s: %d, %v", id, len(ex), err)
		}
		if ev, err := b.store.Events(b.ctx, id); err != nil || len(ev) != 0 {
			t.Fatalf("events of deleted %s: %d, %v", id, len(ev), err)
		}
	}
	// d-open was claimed and settled in the same statements as them (on
	// Postgres their events share log rows): its events stay whole, and a
	// reader of the log sees none of theirs.
	eq(t, "history of d-open", b.types("d-open"),
		[]string{"task.enqueued", "task.claimed", "task.started", "task.failed", "task.dead_lettered"})
	page, err := b.store.ReadEvents(b.ctx, store.EventQuery{Limit: store.MaxEventLimit})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range page.Events {
		if e.Subject == "s1" || e.Subject == "s2" || e.Subject == "s3" {
			t.Fatalf("event %s of deleted task %s still read", e.Type, e.Subject)
		}
	}

	b.clock.Advance(time.Hour) // canceled: past 2h
	retain(backstop.RetentionResult{Canceled: 1})
	present("d-open", "d-resolved", "p1")

	b.clock.Advance(23 * time.Hour) // closed dead letters: past 24h
	retain(backstop.RetentionResult{DeadLetters: 1})
	// The open dead letter and the pending task are never deleted.
	present("d-open", "p1")
	if ev, err := b.store.Events(b.ctx, "d-resolved"); err != nil || len(ev) != 0 {
		t.Fatalf("events of the purged dead letter: %d, %v", len(ev), err)
	}
	b.clock.Advance(365 * 24 * time.Hour)
	// The tasks stay; their events (d-open: enqueued, claimed, started,
	// failed, dead_lettered; p1: enqueued) are past the 7-day event horizon.
	retain(backstop.RetentionResult{Events: 6})
	present("d-open", "p1")
	if got := b.get("d-open"); len(got.Executions) != 1 || got.DLQStatus != bt.DLQOpen {
		t.Fatalf("open dead letter changed: %+v", got)
	}
}

func (s *suite) testRetentionKeep(t *testing.T) {
	t.Parallel()
	b := s.setup(t, &backstop.Config{Retention: backstop.RetentionConfig{Succeeded: -1, Canceled: -1, DeadLetters: -1, Events: -1}})
	retentionFixture(t, b)
	b.clock.Advance(10 * 365 * 24 * time.Hour)
	got, err := backstop.Retain(b.ctx, b.c)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "retention result", got, backstop.RetentionResult{})
	eq(t, "tasks", b.count(), 7)
}

func (s *suite) testStats(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	empty, err := b.c.Stats(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(empty.Tasks) != 0 || len(empty.DeadLetters) != 0 || empty.OldestPendingRunAt != nil || empty.OldestRunningSince != nil {
		t.Fatalf("stats of an empty store: %+v", empty.Stats)
	}
	retentionFixture(t, b)
	if _, err := b.store.TryLead(b.ctx, "maintenance", "w", b.clock.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
	// One task running since the fixture's claim time.
	b.enqueue(backstop.EnqueueParams{ID: "run1", Queue: "busy", Kind: "k"})
	claimedAt := b.clock.Now()
	if _, err := b.store.Claim(b.ctx, store.ClaimParams{Queue: "busy", WorkerID: "w", Max: 1, Now: claimedAt, Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(10 * time.Minute)
	st, err := b.c.Stats(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, c := range st.Tasks {
		counts[c.Queue+"/"+string(c.State)] = c.Count
	}
	eq(t, "rows per queue and state", counts, map[string]int64{
		"r/succeeded": 3, "r/dead": 2, "other/canceled": 1, "other/pending": 1, "busy/running": 1,
	})
	eq(t, "dead letters", st.DeadLetters, []store.DeadLetterCount{
		{Status: bt.DLQOpen, Reason: bt.ReasonPermanentError, Count: 1},
		{Status: bt.DLQResolved, Reason: bt.ReasonPermanentError, Count: 1},
	})
	if st.OldestPendingAge < backstop.Duration(10*time.Minute) || st.OldestRunningAge < backstop.Duration(10*time.Minute) ||
		st.OldestRunningAge > backstop.Duration(11*time.Minute) {
		t.Fatalf("oldest pending %s, oldest running %s: want about 10m each", st.OldestPendingAge, st.OldestRunningAge)
	}
	tables := map[string]int64{}
	for _, x := range st.Tables {
		tables[x.Table] = x.Bytes
	}
	for _, name := range []string{"backstop_tasks", "backstop_executions", "backstop_payloads", "backstop_leaders"} {
		n, ok := tables[name]
		if !ok {
			t.Fatalf("table %s missing from stats (%v)", name, tables)
		}
		if n == 0 || n < -1 {
			t.Fatalf("table %s: %d bytes, want a size or -1 (n/a)", name, n)
		}
	}
	if st.DatabaseBytes <= 0 {
		t.Fatalf("database bytes %d", st.DatabaseBytes)
	}
	if len(st.Leaders) != 1 || st.Leaders[0].LeaderID != "w" {
		t.Fatalf("leaders %+v", st.Leaders)
	}
}

func (s *suite) testViews(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	ids := func(v backstop.View) string {
		t.Helper()
		ts, err := b.c.ListView(b.ctx, v, 100)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, x := range ts {
			out = append(out, x.ID)
		}
		return strings.Join(out, ",")
	}
	if _, err := b.c.ListView(b.ctx, "bogus", 10); !errors.Is(err, backstop.ErrInvalid) {
		t.Fatalf("unknown view: %v, want ErrInvalid", err)
	}
	later := b.clock.Now().Add(time.Hour)
	b.enqueue(backstop.EnqueueParams{ID: "fresh-scheduled", Queue: "v", Kind: "k", RunAt: later})
	for _, id := range []string{"retry", "exhausted", "perm", "ok", "old-fail"} {
		b.enqueue(backstop.EnqueueParams{ID: id, Queue: "v", Kind: "k"})
	}
	// settle claims one task and settles it as told.
	settle := func(id string, st store.Settlement) {
		t.Helper()
		now := b.clock.Now()
		var task *bt.Task
		for range 10 {
			got, err := b.store.Claim(b.ctx, store.ClaimParams{Queue: "v", WorkerID: "w", Max: 10, Now: now, Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			var back []store.Settlement
			for _, c := range got {
				if c.ID == id {
					task = c
					continue
				}
				back = append(back, store.Settlement{TaskID: c.ID, ExecutionID: c.ExecutionID, Outcome: bt.OutcomeReleased,
					FinishedAt: now, State: bt.StatePending, RunAt: now, Uncharged: true})
			}
			if _, err := b.store.Settle(b.ctx, back); err != nil {
				t.Fatal(err)
			}
			if task != nil {
				break
			}
		}
		if task == nil {
			t.Fatalf("could not claim %s", id)
		}
		st.TaskID, st.ExecutionID, st.FinishedAt = id, task.ExecutionID, now
		if ok, err := b.store.Settle(b.ctx, []store.Settlement{st}); err != nil || !ok[0] {
			t.Fatalf("settle %s: %v %v", id, ok, err)
		}
	}
	settle("old-fail", store.Settlement{Outcome: bt.OutcomeTimeout, Error: "slow", State: bt.StatePending, RunAt: b.clock.Now()})
	b.clock.Advance(time.Hour)
	settle("old-fail", store.Settlement{Outcome: bt.OutcomeSucceeded, State: bt.StateSucceeded})
	b.clock.Advance(time.Hour)
	settle("perm", store.Settlement{Outcome: bt.OutcomePermanentError, Error: "bad", State: bt.StateDead, DeadReason: bt.ReasonPermanentError})
	b.clock.Advance(time.Minute)
	settle("exhausted", store.Settlement{Outcome: bt.OutcomeTransientError, Error: "again", State: bt.StateDead, DeadReason: bt.ReasonAttemptsExhausted})
	b.clock.Advance(time.Minute)
	settle("retry", store.Settlement{Outcome: bt.OutcomeTransientError, Error: "again", State: bt.StateScheduled, RunAt: b.clock.Now().Add(time.Hour)})
	settle("ok", store.Settlement{Outcome: bt.OutcomeSucceeded, State: bt.StateSucceeded})

	eq(t, "pending retries", ids(backstop.ViewPendingRetries), "retry")
	eq(t, "retry exhausted", ids(backstop.ViewRetryExhausted), "exhausted")
	eq(t, "recent failures, most recent first", ids(backstop.ViewRecentFailures), "retry,exhausted,perm,old-fail")
	// old-fail's failure (timeout) is now 24h and a bit ago; perm's is not.
	b.clock.Advance(22*time.Hour + 30*time.Minute)
	eq(t, "recent failures after a day", ids(backstop.ViewRecentFailures), "retry,exhausted,perm")
	if ts, err := b.c.ListView(b.ctx, backstop.ViewRecentFailures, 1); err != nil || len(ts) != 1 || ts[0].ID != "retry" {
		t.Fatalf("limit 1: %v", err)
	}
}
