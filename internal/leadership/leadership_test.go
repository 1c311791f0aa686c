package leadership_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/leadership"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlitestore"
)

func open(t *testing.T) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "lead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestElection: on one real store, one of two candidates takes the lease,
// the other cannot while it is held; a resign hands it over at once; a
// lease not renewed within its TTL is taken by the other, and the old
// holder learns it lost at its next round. OnChange reports each change.
func TestElection(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := base
	now := func() time.Time { return clock }
	changes := map[string][]bool{}
	cand := func(id string) *leadership.Elector {
		return leadership.New(s, leadership.Config{Name: "maintenance", ID: id, TTL: time.Minute, Now: now,
			OnChange: func(l bool) { changes[id] = append(changes[id], l) }})
	}
	a, b := cand("a"), cand("b")
	if !a.Elect(ctx, time.Now()) || !a.IsLeader() {
		t.Fatal("a could not take a free lease")
	}
	if b.Elect(ctx, time.Now()) || b.IsLeader() {
		t.Fatal("b took a held lease")
	}
	if !a.Elect(ctx, time.Now()) {
		t.Fatal("a could not renew its lease")
	}
	a.Resign()
	if a.IsLeader() {
		t.Fatal("a leads after resigning")
	}
	if _, err := s.Leader(ctx, "maintenance"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("lease after resign: %v, want none", err)
	}
	if !b.Elect(ctx, time.Now()) {
		t.Fatal("b could not take a resigned lease")
	}
	// b stops renewing; past its TTL (on the store's clock) a takes over.
	clock = base.Add(2 * time.Minute)
	if !a.Elect(ctx, time.Now()) {
		t.Fatal("a could not take an expired lease")
	}
	if b.Elect(ctx, time.Now()) || b.IsLeader() {
		t.Fatal("b still leads after its lease was taken")
	}
	l, err := s.Leader(ctx, "maintenance")
	if err != nil || l.LeaderID != "a" {
		t.Fatalf("leader row %+v %v, want a", l, err)
	}
	want := map[string]string{"a": "[true false true]", "b": "[true false]"}
	for id, w := range want {
		if got := fmt.Sprint(changes[id]); got != w {
			t.Errorf("%s's changes %s, want %s", id, got, w)
		}
	}
}

// TestRunResignsOnStop: Run takes the lease at once and resigns it when
// its context ends.
func TestRunResignsOnStop(t *testing.T) {
	s := open(t)
	taken := make(chan bool, 4)
	e := leadership.New(s, leadership.Config{Name: "m", ID: "x", TTL: time.Minute,
		OnChange: func(l bool) { taken <- l }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx, time.Hour); close(done) }()
	if !<-taken {
		t.Fatal("first change was not taking the lease")
	}
	cancel()
	<-done
	if <-taken || e.IsLeader() {
		t.Fatal("Run ended without resigning")
	}
	if _, err := s.Leader(context.Background(), "m"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("lease after Run: %v, want none", err)
	}
}
