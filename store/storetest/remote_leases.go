package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/remote"
	"github.com/backstophq/backstop/store"
)

// testRemoteLeases: the store keeps one secret per name whichever caller
// stores it first; lease tokens are secrets every client sharing the
// database verifies (the execution id is not one); and each remote
// settlement's events name the actor who reported it, also when
// settlements of several actors are written together.
func (s *suite) testRemoteLeases(t *testing.T) {
	t.Run("Secret", s.testSecret)
	t.Run("TokensShared", s.testLeaseTokensShared)
	t.Run("RotateSecret", s.testRotateSecret)
	t.Run("LeaseKeyRotation", s.testLeaseKeyRotation)
	t.Run("Actor", s.testRemoteActor)
}

func (s *suite) testSecret(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	now := b.clock.Now()
	a, err := b.store.Secret(b.ctx, "k1", []byte("first"), now)
	if err != nil || string(a) != "first" {
		t.Fatalf("first secret: %q %v", a, err)
	}
	again, err := b.store.Secret(b.ctx, "k1", []byte("second"), now)
	if err != nil || string(again) != "first" {
		t.Fatalf("second candidate: %q %v, want the stored %q", again, err, "first")
	}
	other, err := b.store.Secret(b.ctx, "k2", []byte("other"), now)
	if err != nil || string(other) != "other" {
		t.Fatalf("another name: %q %v", other, err)
	}
	// Concurrent first uses agree on one value.
	var wg sync.WaitGroup
	got := make([][]byte, 8)
	errs := make([]error, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = b.store.Secret(b.ctx, "race", []byte(fmt.Sprintf("candidate-%d", i)), now)
		}()
	}
	wg.Wait()
	for i := range got {
		if errs[i] != nil || !bytes.Equal(got[i], got[0]) {
			t.Fatalf("concurrent secret %d: %q %v, want %q like the others", i, got[i], errs[i], got[0])
		}
	}
}

// testRotateSecret: a rotation replaces the value and keeps the one it
// replaced, with its end, replacing an earlier kept one; a rotation of a
// name with no value stores it and keeps nothing.
func (s *suite) testRotateSecret(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	now := b.clock.Now()
	versions := func(name string) (string, string, time.Time) {
		t.Helper()
		cur, prev, until, err := b.store.SecretVersions(b.ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return string(cur), string(prev), until
	}
	if cur, prev, _ := versions("k"); cur != "" || prev != "" {
		t.Fatalf("before any: %q %q", cur, prev)
	}
	if _, err := b.store.Secret(b.ctx, "k", []byte("one"), now); err != nil {
		t.Fatal(err)
	}
	if err := b.store.RotateSecret(b.ctx, "k", []byte("two"), now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	cur, prev, until := versions("k")
	if cur != "two" || prev != "one" || !until.Equal(now.Add(time.Hour)) {
		t.Fatalf("after a rotation: %q %q %s, want two, one until %s", cur, prev, until, now.Add(time.Hour))
	}
	if got, err := b.store.Secret(b.ctx, "k", []byte("candidate"), now); err != nil || string(got) != "two" {
		t.Fatalf("Secret after a rotation: %q %v, want two", got, err)
	}
	rotated := store.NewEvent(now, "lease_key.rotated", "", "", "", "ops", []byte(`{"n":3}`))
	if err := b.store.RotateSecret(b.ctx, "k", []byte("three"), now, now.Add(2*time.Hour), rotated); err != nil {
		t.Fatal(err)
	}
	if evs := b.readStream("type.lease_key.rotated", 1); len(evs) != 1 || evs[0].ID != rotated.ID {
		t.Fatalf("the rotation's record: %+v, want the event it was given", evs)
	}
	if cur, prev, until := versions("k"); cur != "three" || prev != "two" || !until.Equal(now.Add(2*time.Hour)) {
		t.Fatalf("after a second rotation: %q %q %s", cur, prev, until)
	}
	if err := b.store.RotateSecret(b.ctx, "fresh", []byte("only"), now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if cur, prev, _ := versions("fresh"); cur != "only" || prev != "" {
		t.Fatalf("rotation of a new name: %q %q, want only and nothing kept", cur, prev)
	}
}

// testLeaseKeyRotation: after RotateLeaseKey, new claims' tokens are
// signed with the new key and every client accepts them (one that has not
// read the new key yet reads it when a token needs it); the tokens signed
// before stay good through the grace, in every client, and are refused
// after it, changing nothing.
func (s *suite) testLeaseKeyRotation(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	b.clock.freeze()
	for _, id := range []string{"old", "new"} {
		b.enqueue(backstop.EnqueueParams{ID: id, Queue: "q", Kind: "k"})
	}
	claim := func() remote.Lease {
		t.Helper()
		ls, err := remote.New(b.c.Engine()).Claim(b.ctx, remote.Claim{Queues: []string{"q"}, WorkerID: "remote", Max: 1, Lease: time.Hour})
		if err != nil || len(ls) != 1 {
			t.Fatalf("claim: %d %v", len(ls), err)
		}
		return ls[0]
	}
	beat := func(c *backstop.Client, l remote.Lease) error {
		_, err := remote.New(c.Engine()).Heartbeat(b.ctx, remote.Beat{TaskID: l.ID, LeaseToken: l.LeaseToken, Lease: time.Hour})
		return err
	}
	old := claim()
	other, err := backstop.NewClient(b.store, &backstop.Config{Clock: b.clock, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := beat(other, old); err != nil { // other reads the key now
		t.Fatal(err)
	}
	if _, err := b.c.RotateLeaseKey(b.ctx, -time.Second); !errors.Is(err, backstop.ErrInvalid) {
		t.Fatalf("a negative grace: %v, want ErrInvalid", err)
	}
	b.clock.Advance(2 * time.Second)
	until, err := b.c.RotateLeaseKey(backstop.WithActor(b.ctx, "sec-ops"), 10*time.Minute)
	if err != nil || !until.Equal(b.clock.Now().Add(10*time.Minute)) {
		t.Fatalf("rotate: %s %v", until, err)
	}
	// The audit trail names who rotated and until when, never a key.
	evs := b.readStream("type.lease_key.rotated", 1)
	if len(evs) != 1 || evs[0].Actor != "sec-ops" || !strings.Contains(string(evs[0].Body), `"grace":"10m`) ||
		!strings.Contains(string(evs[0].Body), "previous_good_until") {
		t.Fatalf("rotation events: %+v", evs)
	}
	fresh := claim()
	for name, c := range map[string]*backstop.Client{"the rotating client": b.c, "another client": other} {
		if err := beat(c, fresh); err != nil {
			t.Fatalf("%s: a token signed with the new key: %v", name, err)
		}
		if err := beat(c, old); err != nil {
			t.Fatalf("%s: a token signed before the rotation, within the grace: %v", name, err)
		}
	}
	b.clock.Advance(10*time.Minute + time.Second)
	for name, c := range map[string]*backstop.Client{"the rotating client": b.c, "another client": other} {
		if err := beat(c, old); !errors.Is(err, remote.ErrLeaseNotCurrent) {
			t.Fatalf("%s: a token of the old key after the grace: %v, want ErrLeaseNotCurrent", name, err)
		}
		if err := beat(c, fresh); err != nil {
			t.Fatalf("%s: the new key's token after the grace: %v", name, err)
		}
	}
	if got := b.get(old.ID); got.State != bt.StateRunning || got.ExecutionID != old.ExecutionID {
		t.Fatalf("the refused token changed its task: %+v", got)
	}
}

func (s *suite) testLeaseTokensShared(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	for _, id := range []string{"a", "b", "c"} {
		b.enqueue(backstop.EnqueueParams{ID: id, Queue: "q", Kind: "k"})
	}
	ls := remoteClaim(t, b, 3)
	for _, l := range ls {
		if l.LeaseToken == "" || l.LeaseToken == l.ExecutionID {
			t.Fatalf("lease token %q of execution %q: want a secret of its own", l.LeaseToken, l.ExecutionID)
		}
	}
	// Another process on the same database (or this one restarted) has
	// no key in memory: it reads the stored one and accepts the tokens.
	other, err := backstop.NewClient(b.store, &backstop.Config{Clock: b.clock, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.New(other.Engine()).Heartbeat(b.ctx, remote.Beat{TaskID: ls[0].ID, LeaseToken: ls[0].LeaseToken}); err != nil {
		t.Fatalf("heartbeat through another client: %v", err)
	}
	if r, err := remote.New(other.Engine()).Complete(b.ctx, ls[0].ID, ls[0].LeaseToken, nil, nil); err != nil || r.State != bt.StateSucceeded {
		t.Fatalf("complete through another client: %+v %v", r, err)
	}
	// The public execution id, a token for another task, a token cut
	// short or altered: refused as a lease that is not current, nothing
	// changed.
	l := ls[1]
	tok := []byte(l.LeaseToken)
	tok[len(tok)-3] ^= 1
	for _, bad := range []string{l.ExecutionID, ls[2].LeaseToken, l.LeaseToken[:len(l.LeaseToken)-1], string(tok),
		l.ExecutionID + ".", "x." + l.LeaseToken} {
		if _, err := remote.New(other.Engine()).Complete(b.ctx, l.ID, bad, nil, nil); !errors.Is(err, remote.ErrLeaseNotCurrent) {
			t.Fatalf("complete with %q: %v, want ErrLeaseNotCurrent", bad, err)
		}
		if _, err := remote.New(b.c.Engine()).Fail(b.ctx, remote.Failure{TaskID: l.ID, LeaseToken: bad, Outcome: bt.OutcomePermanentError}); !errors.Is(err, remote.ErrLeaseNotCurrent) {
			t.Fatalf("fail with %q: %v, want ErrLeaseNotCurrent", bad, err)
		}
		if _, err := remote.New(b.c.Engine()).Release(b.ctx, l.ID, bad, nil); !errors.Is(err, remote.ErrLeaseNotCurrent) {
			t.Fatalf("release with %q: %v, want ErrLeaseNotCurrent", bad, err)
		}
		if _, err := remote.New(b.c.Engine()).AppendLogs(b.ctx, l.ID, bad, []remote.LogLine{{Line: "x"}}); !errors.Is(err, remote.ErrLeaseNotCurrent) {
			t.Fatalf("logs with %q: %v, want ErrLeaseNotCurrent", bad, err)
		}
		if _, err := remote.New(b.c.Engine()).Heartbeat(b.ctx, remote.Beat{TaskID: l.ID, LeaseToken: bad}); !errors.Is(err, remote.ErrLeaseNotCurrent) {
			t.Fatalf("heartbeat with %q: %v, want ErrLeaseNotCurrent", bad, err)
		}
	}
	if got := b.get(l.ID); got.State != bt.StateRunning || got.ExecutionID != l.ExecutionID || len(got.Executions) != 0 {
		t.Fatalf("refused tokens changed the task: %+v", got)
	}
	if lines, err := b.c.ReadLogs(b.ctx, l.ID, l.ExecutionID, 0, 10); err != nil || len(lines) != 0 {
		t.Fatalf("refused tokens wrote logs: %v %v", lines, err)
	}
	if r, err := remote.New(b.c.Engine()).Complete(b.ctx, l.ID, l.LeaseToken, nil, nil); err != nil || r.State != bt.StateSucceeded {
		t.Fatalf("complete with the real token: %+v %v", r, err)
	}
}

func (s *suite) testRemoteActor(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	const n = 6
	for i := range n {
		b.enqueue(backstop.EnqueueParams{ID: fmt.Sprintf("t%d", i), Queue: "q", Kind: "k", MaxAttempts: 1})
	}
	ls := remoteClaim(t, b, n)
	byID := map[string]remote.Lease{}
	for _, l := range ls {
		byID[l.ID] = l
	}
	as := func(actor string) context.Context { return backstop.WithActor(b.ctx, actor) }
	if _, err := remote.New(b.c.Engine()).Heartbeat(as("alice"), remote.Beat{TaskID: "t0", LeaseToken: byID["t0"].LeaseToken,
		Progress: &bt.Progress{Total: 2, Completed: 1}}); err != nil {
		t.Fatal(err)
	}
	// Settlements of different actors at the same moment: the batcher may
	// write them together, and each keeps its actor.
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, actor := range []string{"alice", "bob", "carol"} {
		wg.Add(2)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("t%d", i)
			_, err := remote.New(b.c.Engine()).Complete(as(actor), id, byID[id].LeaseToken, nil, nil)
			errs <- err
		}()
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("t%d", i+3)
			var err error
			if i == 2 {
				var outs []remote.Outcome
				outs, err = remote.New(b.c.Engine()).CompleteMany(as(actor), []remote.Completion{{TaskID: id, LeaseToken: byID[id].LeaseToken}})
				if err == nil {
					err = outs[0].Err
				}
			} else {
				_, err = remote.New(b.c.Engine()).Fail(as(actor), remote.Failure{TaskID: id, LeaseToken: byID[id].LeaseToken,
					Outcome: bt.OutcomeTransientError, Error: "boom"})
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"t0": "alice", "t1": "bob", "t2": "carol", "t3": "alice", "t4": "bob", "t5": "carol"}
	for id, actor := range want {
		evs, err := b.c.Events(b.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, e := range evs {
			switch e.Type {
			case "task.progress", "task.started", "task.succeeded", "task.failed", "task.dead_lettered":
				seen++
				if e.Actor != actor {
					t.Errorf("%s: %s by %q, want %q", id, e.Type, e.Actor, actor)
				}
			}
		}
		if seen < 2 {
			t.Errorf("%s: %d settlement events in %v", id, seen, evs)
		}
	}
	// Unnamed callers are the library, as for enqueues and cancels.
	b.enqueue(backstop.EnqueueParams{ID: "lib", Queue: "q2", Kind: "k"})
	l, err := remote.New(b.c.Engine()).Claim(b.ctx, remote.Claim{Queues: []string{"q2"}, WorkerID: "w", Lease: 10 * time.Second})
	if err != nil || len(l) != 1 {
		t.Fatalf("claim: %v %v", l, err)
	}
	if _, err := remote.New(b.c.Engine()).Release(b.ctx, "lib", l[0].LeaseToken, nil); err != nil {
		t.Fatal(err)
	}
	evs, _ := b.c.Events(b.ctx, "lib")
	if last := evs[len(evs)-1]; last.Type != "task.released" || last.Actor != "library" {
		t.Fatalf("release by the library: %s by %q", last.Type, last.Actor)
	}
}
