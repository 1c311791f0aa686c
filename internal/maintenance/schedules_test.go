package maintenance_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/internal/schedule"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// putSchedule stores a schedule of spec whose first tick is the next one
// after the clock's now.
func (b *bundle) putSchedule(name string, spec schedule.Spec, missed schedule.Missed) time.Time {
	b.t.Helper()
	sch, err := schedule.Parse(spec)
	if err != nil {
		b.t.Fatal(err)
	}
	now := b.clock.Now()
	first := sch.First(now)
	if err := b.s.PutSchedule(b.ctx, store.Schedule{Name: name, Every: spec.Every, Cron: spec.Cron, TZ: spec.TZ,
		Missed: string(missed), Task: store.ScheduleTask{Queue: "cron", Kind: "report", Payload: json.RawMessage(`{"a":1}`)},
		NextRunAt: first, CreatedAt: now, UpdatedAt: now}, false, bt.Event{}); err != nil {
		b.t.Fatal(err)
	}
	return first
}

// scheduled are the tasks of queue cron, by idempotency key.
func (b *bundle) scheduled() map[string]int {
	b.t.Helper()
	ts, err := b.s.List(b.ctx, store.ListFilter{Queue: "cron", Limit: 1000})
	if err != nil {
		b.t.Fatal(err)
	}
	out := map[string]int{}
	for _, t := range ts {
		out[t.IdempotencyKey]++
	}
	return out
}

// eventCount counts the events of type typ, once at least min are final
// (on PostgreSQL, once no older transaction runs).
func (b *bundle) eventCount(typ string, min int) int {
	b.t.Helper()
	var n int
	testwait.For(b.t, fmt.Sprintf("%d %s events", min, typ), func() bool { n = b.readEventCount(typ); return n >= min })
	return n
}

func (b *bundle) readEventCount(typ string) int {
	b.t.Helper()
	p, err := b.s.ReadEvents(b.ctx, store.EventQuery{Stream: store.Stream{Kind: store.StreamType, Value: typ}, Limit: 1000})
	if err != nil {
		b.t.Fatal(err)
	}
	return len(p.Events)
}

// TestSchedulesExactlyOncePerTick: two engines, each on its own
// connection to the same database and both believing they lead, run the
// schedules round at the same frozen times; every tick of an interval
// schedule and of a cron schedule enqueues exactly one task (its key
// naming the tick), one schedule.ticked event each, and the schedule
// records the last run.
func TestSchedulesExactlyOncePerTick(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		b := setup(t, db, nil)
		s2, err := dburl.Open(b.ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s2.Close() })
		e2, err := engine.New(s2, &engine.Config{Clock: b.clock, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		first := b.putSchedule("every10s", schedule.Spec{Every: 10 * time.Second}, schedule.MissedSkip)
		b.putSchedule("cron30s", schedule.Spec{Cron: "*/30 * * * * *"}, schedule.MissedSkip)
		svcs := []maintenance.Service{maintenance.NewSchedules(b.e, time.Second), maintenance.NewSchedules(e2, time.Second)}

		b.clock.Advance(first.Sub(b.clock.Now()) - time.Millisecond)
		b.run(svcs[0])
		if n := len(b.scheduled()); n != 0 {
			t.Fatalf("%d tasks before the first tick", n)
		}
		want := map[string]int{}
		for range 12 { // two minutes of ticks, every 10s
			b.clock.Advance(10 * time.Second)
			var wg sync.WaitGroup
			for _, svc := range svcs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := svc.RunOnce(context.Background()); err != nil {
						t.Errorf("round: %v", err)
					}
				}()
			}
			wg.Wait()
		}
		for tick := first; !tick.After(b.clock.Now()); tick = tick.Add(10 * time.Second) {
			want[maintenance.IdempotencyKey("every10s", tick)] = 1
			if tick.Second()%30 == 0 {
				want[maintenance.IdempotencyKey("cron30s", tick)] = 1
			}
		}
		got := b.scheduled()
		if len(got) != len(want) {
			t.Errorf("%d ticks enqueued, want %d: %v", len(got), len(want), got)
		}
		for k := range want {
			if got[k] != 1 {
				t.Errorf("tick %s: %d tasks, want 1", k, got[k])
			}
		}
		eq(t, "schedule.ticked events", b.eventCount(store.EventScheduleTicked, len(want)), len(want))
		eq(t, "schedule.skipped events", b.eventCount(store.EventScheduleSkipped, 0), 0)
		sc, err := b.s.GetSchedule(b.ctx, "every10s")
		if err != nil {
			t.Fatal(err)
		}
		last := first.Add(11 * 10 * time.Second)
		if sc.LastRunAt == nil || !sc.LastRunAt.Equal(last) || sc.LastOutcome != store.ScheduleEnqueued ||
			!sc.NextRunAt.Equal(last.Add(10*time.Second)) || sc.LastTaskID == "" {
			t.Errorf("schedule after the rounds: last %v %s next %s task %q, want last %s", sc.LastRunAt, sc.LastOutcome, sc.NextRunAt, sc.LastTaskID, last)
		}
		task := b.get(sc.LastTaskID)
		eq(t, "the task's kind", task.Kind, "report")
		eq(t, "the task's run_at", task.RunAt.Equal(last), true)
	})
}

// TestSchedulesMissedAndPaused: after downtime, skip enqueues only the
// tick on time and reports each missed one as a schedule.skipped event;
// a paused schedule is not due.
func TestSchedulesMissedAndPaused(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		b := setup(t, db, nil)
		first := b.putSchedule("m", schedule.Spec{Every: time.Minute}, schedule.MissedSkip)
		svc := maintenance.NewSchedules(b.e, time.Second)
		b.clock.Advance(first.Sub(b.clock.Now()) + 10*time.Minute + 30*time.Second) // ticks 0..10 due, 0..9 missed
		b.run(svc)
		got := b.scheduled()
		if len(got) != 1 || got[maintenance.IdempotencyKey("m", first.Add(10*time.Minute))] != 1 {
			t.Errorf("skip after downtime enqueued %v, want the tick on time alone", got)
		}
		eq(t, "schedule.skipped events", b.eventCount(store.EventScheduleSkipped, 10), 10)
		b.run(svc)
		eq(t, "tasks after a second round", len(b.scheduled()), 1)

		if _, err := b.s.PauseSchedule(b.ctx, "m", true, time.Time{}, nil); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(5 * time.Minute)
		b.run(svc)
		eq(t, "tasks while paused", len(b.scheduled()), 1)
	})
}
