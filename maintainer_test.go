package backstop

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store/sqlitestore"
)

// TestMaintainerRetainsAndMaintains: a Maintainer made by the client (what
// `backstop serve` runs), with no worker of its own, leads both elections
// on a real SQLite store and runs their services: a scheduled task is
// promoted, and a task a worker out of the election finished is deleted by
// retention. Stop resigns both leases.
func TestMaintainerRetainsAndMaintains(t *testing.T) {
	s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "backstop.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(s, &Config{Retention: RetentionConfig{Succeeded: time.Millisecond, Interval: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.NewMaintainer(&MaintainerConfig{LeaderTTL: time.Millisecond}); err == nil {
		t.Fatal("a 1ms leader TTL was accepted")
	}
	m, err := c.NewMaintainer(&MaintainerConfig{ID: "solo", Interval: 20 * time.Millisecond, LeaderTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			m.Stop()
		}
	})
	w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"q": 1}, PollInterval: 20 * time.Millisecond, MaintenanceInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("k", HandlerFunc(func(context.Context, *Task) error { return nil }))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	done, err := c.Enqueue(ctx, EnqueueParams{Queue: "q", Kind: "k", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	later, err := c.Enqueue(ctx, EnqueueParams{Queue: "idle", Kind: "k", Payload: []byte(`{}`), Delay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the maintainer to lead both elections", func() bool { return m.IsLeader() && m.IsRetentionLeader() })
	if w.IsLeader() {
		t.Fatal("a worker out of the election leads")
	}
	testwait.For(t, "the finished task to be deleted by retention", func() bool {
		_, err := c.Get(ctx, done.Task.ID)
		return errors.Is(err, ErrNotFound)
	})
	testwait.For(t, "the scheduled task to be promoted", func() bool {
		x, err := c.Get(ctx, later.Task.ID)
		return err == nil && x.State == StatePending
	})
	m.Stop()
	stopped = true
	for _, name := range []string{MaintenanceLeadership, RetentionLeadership} {
		if l, err := s.Leader(ctx, name); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s lease after Stop: %+v %v, want resigned", name, l, err)
		}
	}
}
