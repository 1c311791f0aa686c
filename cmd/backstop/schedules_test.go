package main

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// TestScheduleSurvivesLeaderKills: a schedule every second, three `backstop
// work` processes on the database; the maintenance leader is SIGKILLed
// twice. Every tick from the first to the last enqueued exactly one task
// (its key naming the tick): no tick lost, none twice.
func TestScheduleSurvivesLeaderKills(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			db := st.url(t)
			if _, stderr, code := runCLI(t, db, "periodic", "add", "tick", "--every", "1s", "--queue", "sched", "--kind", "tick"); code != 0 {
				t.Fatalf("periodic add: exit %d: %s", code, stderr)
			}
			ctx := context.Background()
			s, err := dburl.Open(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			procs := map[string]*worker{}
			for _, id := range []string{"sched-a", "sched-b", "sched-c"} {
				procs[id] = startDBWorker(t, db, id, "elsewhere", nil)
			}
			leader := func() string {
				l, err := s.Leader(ctx, maintenance.MaintenanceLeadership)
				if errors.Is(err, store.ErrNotFound) {
					return ""
				}
				if err != nil {
					t.Fatal(err)
				}
				return l.LeaderID
			}
			tasks := func() []string {
				ts, err := s.List(ctx, store.ListFilter{Queue: "sched", Limit: 10000})
				if err != nil {
					t.Fatal(err)
				}
				keys := make([]string, len(ts))
				for i, tk := range ts {
					keys[i] = tk.IdempotencyKey
				}
				return keys
			}
			for kill := range 2 {
				var l string
				n := len(tasks())
				testwait.For(t, "a leader enqueuing ticks", func() bool {
					l = leader()
					return procs[l] != nil && len(tasks()) >= n+3
				})
				if err := syscall.Kill(-procs[l].cmd.Process.Pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				procs[l].wait(t, l)
				delete(procs, l)
				t.Logf("kill %d: leader %s killed", kill+1, l)
				testwait.For(t, "another leader", func() bool { return procs[leader()] != nil })
			}
			n := len(tasks())
			testwait.For(t, "ticks after the second takeover", func() bool { return len(tasks()) >= n+3 })
			if _, stderr, code := runCLI(t, db, "periodic", "pause", "tick"); code != 0 {
				t.Fatalf("periodic pause: exit %d: %s", code, stderr)
			}
			sc, err := s.GetSchedule(ctx, "tick")
			if err != nil {
				t.Fatal(err)
			}
			keys := tasks()
			seen := map[string]int{}
			for _, k := range keys {
				seen[k]++
			}
			first := sc.CreatedAt.Truncate(time.Second).Add(time.Second)
			last := *sc.LastEnqueuedAt
			want := 0
			for tick := first; !tick.After(last); tick = tick.Add(time.Second) {
				want++
				if k := maintenance.IdempotencyKey("tick", tick); seen[k] != 1 {
					t.Errorf("tick %s: %d tasks, want 1", tick.Format(time.RFC3339), seen[k])
				}
			}
			if len(keys) != want {
				t.Errorf("%d tasks for %d ticks from %s to %s", len(keys), want, first.Format(time.RFC3339), last.Format(time.RFC3339))
			}
			t.Logf("%d ticks, one task each, across two leader kills", want)
		})
	}
}
