package maintenance_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/internal/testdb"
)

// TestServicesOrder: the maintenance leadership's services, in the order
// a round (and Maintain) runs them, each on the interval given.
func TestServicesOrder(t *testing.T) {
	b := setup(t, testdb.SQLite(t), nil)
	var names []string
	for _, s := range maintenance.Services(b.e, 7*time.Second) {
		names = append(names, s.Name())
		eq(t, s.Name()+" interval", s.Interval(), 7*time.Second)
	}
	want := []string{"promote_scheduled", "lease_expiry", "deadlines", "lost_workers", "ordering_drains", "run_wakeups", "schedules", "activity_rollup", "task_counts"}
	if !slices.Equal(names, want) {
		t.Fatalf("services %v, want %v", names, want)
	}
}

// TestDefaultLeaderships: Default runs retention under the retention
// leadership, the remote spans' sweep in every process without an
// election, and the maintenance services only under the maintenance
// leadership: while another process holds it they do not run here; once it
// resigns, this process takes it and runs each of them.
func TestDefaultLeaderships(t *testing.T) {
	b := setup(t, testdb.SQLite(t), nil)
	ctx := context.Background()
	if ok, err := b.s.TryLead(ctx, maintenance.MaintenanceLeadership, "other", b.clock.Now(), time.Hour); err != nil || !ok {
		t.Fatalf("other takes the maintenance lease: %v %v", ok, err)
	}
	ch := make(chan event, 1000)
	m := maintenance.New(maintenance.Config{ID: "a", TTL: 300 * time.Millisecond, Store: b.s, Now: b.e.Now,
		Logger: slog.New(slog.DiscardHandler), Hooks: signals("a", ch)})
	maintenance.Default(m, b.e, time.Hour)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)

	awaitAll(t, ch, event{"a", "leading=true", maintenance.RetentionLeadership},
		event{"a", "ran", "retention"}, event{"a", "ran", "remote_spans"})
	for _, e := range pending(ch) {
		if e.name != "retention" && e.name != maintenance.RetentionLeadership {
			t.Fatalf("while another process leads maintenance: %v", e)
		}
	}
	if m.IsLeader(maintenance.MaintenanceLeadership) || !m.IsLeader(maintenance.RetentionLeadership) {
		t.Fatal("a leads maintenance, or not retention")
	}

	if err := b.s.ResignLead(ctx, maintenance.MaintenanceLeadership, "other"); err != nil {
		t.Fatal(err)
	}
	want := []event{{"a", "leading=true", maintenance.MaintenanceLeadership}}
	for _, s := range maintenance.Services(b.e, time.Hour) {
		want = append(want, event{"a", "ran", s.Name()})
	}
	awaitAll(t, ch, want...)
}

// TestPolicyOf: retention keeps closed dead letters at least the purge
// floor; a longer retention, and keeping them forever (negative), stand;
// the other durations and the interval are the configuration's.
func TestPolicyOf(t *testing.T) {
	cfg := func(dl time.Duration) *engine.Config {
		return &engine.Config{PurgeFloor: 7 * 24 * time.Hour, Retention: engine.RetentionConfig{Succeeded: time.Hour,
			Canceled: 2 * time.Hour, DeadLetters: dl, Events: 3 * time.Hour, Runs: 4 * time.Hour, Interval: 5 * time.Minute}}
	}
	for dl, want := range map[time.Duration]time.Duration{
		time.Hour:           7 * 24 * time.Hour, // below the floor: the floor
		30 * 24 * time.Hour: 30 * 24 * time.Hour,
		-1:                  -1, // forever
	} {
		got := maintenance.PolicyOf(cfg(dl))
		wantP := maintenance.RetentionPolicy{Succeeded: time.Hour, Canceled: 2 * time.Hour, DeadLetters: want, Events: 3 * time.Hour, Runs: 4 * time.Hour}
		if got != wantP {
			t.Fatalf("dead letters %s: policy %+v, want %+v", dl, got, wantP)
		}
	}
	b := setup(t, testdb.SQLite(t), cfg(time.Hour))
	eq(t, "retention interval", maintenance.RetentionOf(b.e).Interval(), 5*time.Minute)
}
