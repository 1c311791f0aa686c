package maintenance_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/internal/testclock"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlitestore"
)

// No maintainer leaves a goroutine behind its Stop.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "maint.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// probe is a service whose rounds do nothing but return err.
type probe struct {
	name  string
	every time.Duration
	err   error
	block bool // RunOnce waits for its context to end
}

func (p *probe) Name() string            { return p.name }
func (p *probe) Interval() time.Duration { return p.every }
func (p *probe) RunOnce(ctx context.Context) error {
	if p.block {
		<-ctx.Done()
		return ctx.Err()
	}
	return p.err
}

// event is one test signal: who (the maintainer's id) did what.
type event struct{ who, what, name string }

func (e event) String() string { return e.who + " " + e.what + " " + e.name }

// signals makes hooks that send every signal of maintainer id to ch. A
// signal nobody reads is dropped once ch is full, so that a test that
// stopped reading never blocks the maintainer's Stop.
func signals(id string, ch chan<- event) maintenance.Hooks {
	send := func(e event) {
		select {
		case ch <- e:
		default:
		}
	}
	return maintenance.Hooks{
		Ran:       func(s string, _ error) { send(event{id, "ran", s}) },
		Leading:   func(l string, on bool) { send(event{id, fmt.Sprint("leading=", on), l}) },
		Withdrawn: func(s string) { send(event{id, "withdrew", s}) },
	}
}

// pending is what ch holds now.
func pending(ch <-chan event) []event {
	var out []event
	for {
		select {
		case e := <-ch:
			out = append(out, e)
		default:
			return out
		}
	}
}

// await reads signals until want arrives and returns those read before it;
// it fails the test after a long bound that only a broken maintainer
// reaches.
func await(t *testing.T, ch <-chan event, want event) []event {
	t.Helper()
	var seen []event
	timeout := time.After(time.Minute)
	for {
		select {
		case e := <-ch:
			if e == want {
				return seen
			}
			seen = append(seen, e)
		case <-timeout:
			t.Fatalf("no signal %q; saw %v", want, seen)
		}
	}
}

// awaitAll waits for every one of want, in any order.
func awaitAll(t *testing.T, ch <-chan event, want ...event) {
	t.Helper()
	left := map[event]bool{}
	for _, w := range want {
		left[w] = true
	}
	var seen []event
	timeout := time.After(time.Minute)
	for len(left) > 0 {
		select {
		case e := <-ch:
			delete(left, e)
			seen = append(seen, e)
		case <-timeout:
			t.Fatalf("no signals %v; saw %v", left, seen)
		}
	}
}

func start(t *testing.T, s store.Store, id string, ch chan<- event, reg func(m *maintenance.Maintainer)) *maintenance.Maintainer {
	t.Helper()
	m := maintenance.New(maintenance.Config{ID: id, TTL: 30 * time.Second, Store: s, Hooks: signals(id, ch),
		Logger: slog.New(slog.DiscardHandler)})
	reg(m)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m
}

// TestServicesRunOnTheirIntervals: every service registered under the
// leadership runs once this process leads, each on its own interval, and a
// service registered under no leadership runs too.
func TestServicesRunOnTheirIntervals(t *testing.T) {
	s := open(t)
	ch := make(chan event, 1000)
	start(t, s, "a", ch, func(m *maintenance.Maintainer) {
		m.Register("m", &probe{name: "fast", every: 5 * time.Millisecond})
		m.Register("m", &probe{name: "slow", every: 20 * time.Millisecond})
		m.Register("", &probe{name: "local", every: 5 * time.Millisecond})
	})
	await(t, ch, event{"a", "leading=true", "m"})
	for _, name := range []string{"fast", "slow", "local"} {
		// Twice each: each one comes back on its interval.
		await(t, ch, event{"a", "ran", name})
		await(t, ch, event{"a", "ran", name})
	}
}

// TestOnlyTheLeaderRuns: two maintainers on one store; only the one that
// took the leadership runs the service; when it stops (resigning), the
// other takes over at once (the TTL is 30s) and runs it.
func TestOnlyTheLeaderRuns(t *testing.T) {
	s := open(t)
	chA, chB := make(chan event, 1000), make(chan event, 1000)
	reg := func(m *maintenance.Maintainer) { m.Register("m", &probe{name: "work", every: 5 * time.Millisecond}) }
	a := start(t, s, "a", chA, reg)
	await(t, chA, event{"a", "leading=true", "m"})
	b := start(t, s, "b", chB, reg)
	// Ten rounds of a, with b standing: b never leads nor runs.
	for range 10 {
		await(t, chA, event{"a", "ran", "work"})
	}
	if got := pending(chB); len(got) > 0 {
		t.Fatalf("b acted while a led: %v", got)
	}
	if b.IsLeader("m") || !a.IsLeader("m") {
		t.Fatalf("a leads %v, b leads %v; want a only", a.IsLeader("m"), b.IsLeader("m"))
	}
	a.Stop()
	pending(chA)
	await(t, chB, event{"b", "leading=true", "m"})
	await(t, chB, event{"b", "ran", "work"})
	if got := pending(chA); len(got) > 0 {
		t.Fatalf("a acted after Stop: %v", got)
	}
	l, err := s.Leader(context.Background(), "m")
	if err != nil || l.LeaderID != "b" {
		t.Fatalf("leader row %+v %v, want b", l, err)
	}
}

// TestNoDutyHandsTheServiceOver: a process whose service says it may not
// do the work (ErrNoDuty, as retention does when the role may not delete)
// stops running it and leaves that service's election, without switching
// the work off for the others: another process takes the leadership and
// runs it. The first process keeps its other leadership.
func TestNoDutyHandsTheServiceOver(t *testing.T) {
	s := open(t)
	chA, chB := make(chan event, 1000), make(chan event, 1000)
	refused := fmt.Errorf("%w: role may not delete: %w", maintenance.ErrNoDuty, store.ErrPermissionDenied)
	a := start(t, s, "a", chA, func(m *maintenance.Maintainer) {
		m.Register("m", &probe{name: "maintain", every: 5 * time.Millisecond})
		m.Register("r", &probe{name: "retention", every: 5 * time.Millisecond, err: refused})
	})
	// It withdraws and resigns the retention lease it held (the election
	// ends in its own goroutine: the two signals come in either order).
	awaitAll(t, chA, event{"a", "withdrew", "retention"}, event{"a", "leading=false", "r"})
	b := start(t, s, "b", chB, func(m *maintenance.Maintainer) {
		m.Register("m", &probe{name: "maintain", every: 5 * time.Millisecond})
		m.Register("r", &probe{name: "retention", every: 5 * time.Millisecond})
	})
	await(t, chB, event{"b", "ran", "retention"})
	for _, e := range pending(chA) {
		if e.name == "retention" || e.name == "r" {
			t.Fatalf("a acted on retention after withdrawing: %v", e)
		}
	}
	if a.IsLeader("r") || !b.IsLeader("r") {
		t.Fatal("the retention leadership is not b's")
	}
	if !a.IsLeader("m") || b.IsLeader("m") {
		t.Fatal("a lost the maintenance leadership by withdrawing from retention")
	}
	// a's maintenance goes on.
	await(t, chA, event{"a", "ran", "maintain"})
}

// TestStopEndsARunningRound: Stop cancels a round in progress and returns
// once every goroutine ended (TestMain checks for leaks); the lease is
// resigned; the maintainer starts again.
func TestStopEndsARunningRound(t *testing.T) {
	s := open(t)
	ch := make(chan event, 1000)
	m := start(t, s, "a", ch, func(m *maintenance.Maintainer) {
		m.Register("m", &probe{name: "stuck", every: time.Millisecond, block: true})
	})
	await(t, ch, event{"a", "leading=true", "m"})
	m.Stop()
	if _, err := s.Leader(context.Background(), "m"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("lease after Stop: %v, want resigned", err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	await(t, ch, event{"a", "leading=true", "m"})
}

// TestServicesDueByTheClock: whether a service is due is read from the
// maintainer's clock, not the wall's. On a stopped clock every service
// runs when the leadership is taken; moved half an hour, the clock makes
// the minutely service run again within a check period, not the hourly
// one; moved another half hour, the hourly one runs again too.
func TestServicesDueByTheClock(t *testing.T) {
	s := open(t)
	clock := testclock.New()
	ch := make(chan event, 1000)
	// TTL 300ms: the services check whether they are due every 100ms.
	m := maintenance.New(maintenance.Config{ID: "a", TTL: 300 * time.Millisecond, Store: s, Now: clock.Now,
		Hooks: signals("a", ch), Logger: slog.New(slog.DiscardHandler)})
	m.Register("m", &probe{name: "hourly", every: time.Hour})
	m.Register("m", &probe{name: "minutely", every: time.Minute})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	awaitAll(t, ch, event{"a", "ran", "hourly"}, event{"a", "ran", "minutely"})

	clock.Advance(30 * time.Minute)
	for _, e := range await(t, ch, event{"a", "ran", "minutely"}) {
		if e.name == "hourly" {
			t.Fatalf("the hourly service ran after half an hour: %v", e)
		}
	}
	clock.Advance(30 * time.Minute)
	await(t, ch, event{"a", "ran", "hourly"})
}
