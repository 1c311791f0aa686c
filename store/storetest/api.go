package storetest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// testAPI: what the HTTP API needs from a store (store/tokens.go,
// store/api.go).
func (s *suite) testAPI(t *testing.T) {
	t.Run("Tokens", s.testTokens)
	t.Run("TokenWritesItsEvent", s.testTokenWritesItsEvent)
	t.Run("CountByQueue", s.testCountByQueue)
	t.Run("CountByQueueDeadLetters", s.testCountByQueueDeadLetters)
	t.Run("CountByQueueEveryState", s.testCountByQueueEveryState)
	t.Run("CountsKept", s.testCountsKept)
}

func hashOf(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

func (s *suite) testTokens(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	ts := b.store.(store.Tokens)
	now := b.clock.Now()
	ops := store.Token{ID: "tok-1", Name: "ops", Role: "operator", Hash: hashOf("s1"), CreatedAt: now}
	if err := ts.CreateToken(b.ctx, ops, bt.Event{}); err != nil {
		t.Fatal(err)
	}
	if err := ts.CreateToken(b.ctx, store.Token{ID: "tok-2", Name: "ops", Role: "viewer", Hash: hashOf("s2"), CreatedAt: now}, bt.Event{}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a second live token named ops: %v, want ErrConflict", err)
	}
	got, err := ts.TokenByHash(b.ctx, hashOf("s1"))
	if err != nil || got.ID != "tok-1" || got.Name != "ops" || got.Role != "operator" || !bytes.Equal(got.Hash, ops.Hash) ||
		!got.CreatedAt.Equal(now) || got.RevokedAt != nil || got.LastUsedAt != nil {
		t.Fatalf("by hash: %+v %v", got, err)
	}
	if _, err := ts.TokenByHash(b.ctx, hashOf("nope")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown hash: %v", err)
	}
	used := now.Add(time.Minute)
	if err := ts.TouchToken(b.ctx, "tok-1", used); err != nil {
		t.Fatal(err)
	}
	if got, _ := ts.TokenByHash(b.ctx, hashOf("s1")); got.LastUsedAt == nil || !got.LastUsedAt.Equal(used) {
		t.Fatalf("last used: %+v", got)
	}

	// Revoke by name, then the name is free again; revoke twice conflicts.
	rv, err := ts.RevokeToken(b.ctx, "ops", now, nil)
	if err != nil || rv.ID != "tok-1" || rv.RevokedAt == nil {
		t.Fatalf("revoke: %+v %v", rv, err)
	}
	if got, _ := ts.TokenByHash(b.ctx, hashOf("s1")); got.RevokedAt == nil {
		t.Fatal("revoked token has no revoked_at")
	}
	if _, err := ts.RevokeToken(b.ctx, "tok-1", now, nil); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("revoke twice: %v", err)
	}
	if _, err := ts.RevokeToken(b.ctx, "nobody", now, nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoke unknown: %v", err)
	}
	if err := ts.CreateToken(b.ctx, store.Token{ID: "tok-3", Name: "ops", Role: "admin", Hash: hashOf("s3"), CreatedAt: now.Add(time.Second)}, bt.Event{}); err != nil {
		t.Fatalf("reuse a revoked token's name: %v", err)
	}
	if err := ts.CreateToken(b.ctx, store.Token{ID: "tok-4", Name: "other", Role: "admin", Hash: hashOf("s3"), CreatedAt: now}, bt.Event{}); err == nil {
		t.Fatal("two tokens with one hash")
	}
	list, err := ts.ListTokens(b.ctx)
	if err != nil || len(list) != 2 || list[0].ID != "tok-1" || list[1].ID != "tok-3" {
		t.Fatalf("list: %+v %v", list, err)
	}
}

// testTokenWritesItsEvent: a token's creation or revocation and its audit
// event commit together: an event the log refuses leaves no token (or the
// token live), a refused change (a duplicate name, a second revoke) writes
// no event, and the events are in the audit stream.
func (s *suite) testTokenWritesItsEvent(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	ts := b.store.(store.Tokens)
	now := b.clock.Now()
	ctx := store.WithReason(store.WithActor(b.ctx, "cli:ops"), "rotation")
	refused := func(store.Token) bt.Event { return bt.Event{Type: store.EventTokenRevoked} } // no time
	count := func(typ string) int {
		t.Helper()
		p, err := b.store.ReadEvents(b.ctx, store.EventQuery{Stream: store.Stream{Kind: store.StreamType, Value: typ}, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(p.Events)
	}

	ci := store.Token{ID: "tok-ci", Name: "ci", Role: "operator", Hash: hashOf("ci"), CreatedAt: now}
	if err := ts.CreateToken(ctx, ci, bt.Event{Type: store.EventTokenCreated}); err == nil {
		t.Fatal("a token whose event has no time (refused by the log) was created")
	}
	if _, err := ts.TokenByHash(b.ctx, ci.Hash); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused event's token is there: %v", err)
	}
	if err := ts.CreateToken(ctx, ci, store.TokenEvent(ctx, now, store.EventTokenCreated, ci)); err != nil {
		t.Fatal(err)
	}
	dup := store.Token{ID: "tok-ci2", Name: "ci", Role: "admin", Hash: hashOf("ci2"), CreatedAt: now}
	if err := ts.CreateToken(ctx, dup, store.TokenEvent(ctx, now, store.EventTokenCreated, dup)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a second live token named ci: %v, want ErrConflict", err)
	}

	if _, err := ts.RevokeToken(ctx, "ci", now, refused); err == nil {
		t.Fatal("a revoke whose event has no time (refused by the log) succeeded")
	}
	if got, err := ts.TokenByHash(b.ctx, ci.Hash); err != nil || got.RevokedAt != nil {
		t.Fatalf("the refused event's revoke is there: %+v %v", got, err)
	}
	audit := func(tok store.Token) bt.Event {
		if tok.ID != ci.ID || tok.Name != "ci" || tok.RevokedAt == nil {
			t.Errorf("audit is given %+v, want the revoked token", tok)
		}
		return store.TokenEvent(ctx, now, store.EventTokenRevoked, tok)
	}
	if _, err := ts.RevokeToken(ctx, "ci", now, audit); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.RevokeToken(ctx, "tok-ci", now, audit); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("revoke twice: %v, want ErrConflict", err)
	}

	testwait.For(t, "the creation's and the revocation's events", func() bool {
		return count(store.EventTokenCreated) == 1 && count(store.EventTokenRevoked) == 1
	})
	if c, r := count(store.EventTokenCreated), count(store.EventTokenRevoked); c != 1 || r != 1 {
		t.Fatalf("%d token.created and %d token.revoked events, want one each", c, r)
	}
	got := b.readStream("audit", 2)
	want := `{"name":"ci","reason":"rotation","role":"operator","target":"tok-ci"}`
	for i, typ := range []string{store.EventTokenCreated, store.EventTokenRevoked} {
		if got[i].Type != typ || got[i].Subject != "tok-ci" || got[i].Actor != "cli:ops" || string(got[i].Body) != want {
			t.Fatalf("audit event %d: %+v %s, want %s of tok-ci by cli:ops with %s", i, got[i], got[i].Body, typ, want)
		}
	}
}

func (s *suite) testCountByQueue(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	reads := b.store.(store.APIStore)
	if qs, err := reads.CountByQueue(b.ctx); err != nil || len(qs) != 0 {
		t.Fatalf("empty store: %+v %v", qs, err)
	}
	var runAts []time.Time
	for _, p := range []backstop.EnqueueParams{
		{Queue: "b", Kind: "k"}, {Queue: "b", Kind: "k"}, {Queue: "b", Kind: "k", Delay: time.Hour}, {Queue: "a", Kind: "k"},
		{Queue: "c", Kind: "k", Delay: time.Hour},
	} {
		r, err := b.c.Enqueue(b.ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		runAts = append(runAts, r.Task.RunAt)
	}
	qs, err := reads.CountByQueue(b.ctx)
	if err != nil || len(qs) != 3 || qs[0].Queue != "a" || qs[1].Queue != "b" ||
		qs[0].Counts[bt.StatePending] != 1 || qs[1].Counts[bt.StatePending] != 2 || qs[1].Counts[bt.StateScheduled] != 1 {
		t.Fatalf("counts: %+v %v", qs, err)
	}
	// The oldest pending run_at: b's first task (not its scheduled one);
	// none in c, whose only task is scheduled.
	if qs[1].OldestPending == nil || !qs[1].OldestPending.Equal(runAts[0]) || qs[0].OldestPending == nil ||
		!qs[0].OldestPending.Equal(runAts[3]) || qs[2].OldestPending != nil {
		t.Fatalf("oldest pending: a %v b %v c %v, want %v %v nil", qs[0].OldestPending, qs[1].OldestPending, qs[2].OldestPending, runAts[3], runAts[0])
	}
}

// CountByQueue's dead letters by status are the gauges' (the read GET
// /v1/counts made before it shared the queues' count): every status, a
// replayed dead letter's task back in pending and its record, tasks of
// other states.
func (s *suite) testCountByQueueDeadLetters(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	for i := range 9 {
		b.dead(backstop.EnqueueParams{ID: fmt.Sprintf("cq-%d", i), Queue: []string{"a", "b"}[i%2], Kind: "k"})
	}
	if _, err := b.c.Discard(b.ctx, backstop.DiscardParams{ID: "cq-0", Reason: "no", Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.Resolve(b.ctx, backstop.ResolveParams{ID: "cq-1", Note: "by hand", Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.Replay(b.ctx, backstop.ReplayParams{ID: "cq-2", Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []backstop.EnqueueParams{{Queue: "a", Kind: "k"}, {Queue: "c", Kind: "k", Delay: time.Hour}} {
		if _, err := b.c.Enqueue(b.ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	qs, err := b.store.(store.APIStore).CountByQueue(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	g, err := b.store.(store.GaugeReader).Gauges(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	tasks, dead := map[string]map[bt.State]int{}, map[string]map[bt.DLQStatus]int{}
	for _, q := range qs {
		tasks[q.Queue], dead[q.Queue] = q.Counts, q.DeadLetters
	}
	wantDead := map[string]map[bt.DLQStatus]int{}
	for q := range g.Tasks {
		wantDead[q] = map[bt.DLQStatus]int{}
		for st, n := range g.DeadLetters[q] {
			if st != "" {
				wantDead[q][st] = n
			}
		}
	}
	if !reflect.DeepEqual(tasks, g.Tasks) {
		t.Fatalf("tasks by queue and state: %v, the gauges %v", tasks, g.Tasks)
	}
	if !reflect.DeepEqual(dead, wantDead) {
		t.Fatalf("dead letters by queue and status: %v, the gauges %v", dead, wantDead)
	}
	if dead["a"][bt.DLQDiscarded] != 1 || dead["b"][bt.DLQResolved] != 1 || dead["a"][bt.DLQOpen] != 3 {
		t.Fatalf("dead letters: %+v", dead)
	}
}

// CountByQueue's counts of every state (each read from its own index on
// PostgreSQL) are the exact grouped scan's, the gauges': tasks scheduled,
// pending, buffered, running, succeeded, canceled and dead in several
// queues, nothing capped below the store's cap; the oldest pending run_at
// is the pending tasks' earliest.
func (s *suite) testCountByQueueEveryState(t *testing.T) {
	t.Parallel()
	b := s.ordBundle(t, backstop.OrderingConfig{})
	b.ordEnqueue("k", 1)
	b.ordEnqueue("k", 3) // waits for 2: buffered
	b.order()
	for i := range 12 {
		q := []string{"a", "b", "c"}[i%3]
		p := backstop.EnqueueParams{ID: fmt.Sprintf("ev-%d", i), Queue: q, Kind: "k"}
		if i%4 == 3 {
			p.Delay = time.Hour
		}
		b.enqueue(p)
		b.clock.Advance(time.Second)
	}
	for _, q := range []string{"a", "b"} {
		got := claim(t, b, q, 2) // running, one then succeeds
		b.succeed(got[0])
	}
	if _, err := b.c.Cancel(b.ctx, "ev-2"); err != nil { // c's first task
		t.Fatal(err)
	}
	b.dead(backstop.EnqueueParams{ID: "ev-dead", Queue: "c", Kind: "k"})
	qs, err := b.store.(store.APIStore).CountByQueue(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	g, err := b.store.(store.GaugeReader).Gauges(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	tasks, dead := map[string]map[bt.State]int{}, map[string]map[bt.DLQStatus]int{}
	for _, q := range qs {
		if len(q.Capped) > 0 {
			t.Fatalf("%s: capped %v below the cap", q.Queue, q.Capped)
		}
		tasks[q.Queue], dead[q.Queue] = q.Counts, q.DeadLetters
		pending, err := b.store.List(b.ctx, store.ListFilter{Queue: q.Queue, States: []bt.State{bt.StatePending}})
		if err != nil {
			t.Fatal(err)
		}
		var oldest *time.Time
		for _, p := range pending {
			if oldest == nil || p.RunAt.Before(*oldest) {
				oldest = &p.RunAt
			}
		}
		if (oldest == nil) != (q.OldestPending == nil) || oldest != nil && !oldest.Equal(*q.OldestPending) {
			t.Fatalf("%s: oldest pending %v, want %v", q.Queue, q.OldestPending, oldest)
		}
	}
	wantDead := map[string]map[bt.DLQStatus]int{}
	for q := range g.Tasks {
		wantDead[q] = map[bt.DLQStatus]int{}
		for st, n := range g.DeadLetters[q] {
			if st != "" {
				wantDead[q][st] = n
			}
		}
	}
	if !reflect.DeepEqual(tasks, g.Tasks) || !reflect.DeepEqual(dead, wantDead) {
		t.Fatalf("counts %v %v, the gauges %v %v", tasks, dead, g.Tasks, wantDead)
	}
	for q, st := range map[string]bt.State{oq: bt.StateBuffered, "a": bt.StateSucceeded, "b": bt.StateRunning,
		"c": bt.StateCanceled} {
		if tasks[q][st] != 1 {
			t.Fatalf("%s: %v, want one %s", q, tasks[q], st)
		}
	}
	if tasks["a"][bt.StateScheduled] != 1 || dead["c"][bt.DLQOpen] != 3 { // ev-dead and what c still had pending
		t.Fatalf("counts %v %v", tasks, dead)
	}
}
