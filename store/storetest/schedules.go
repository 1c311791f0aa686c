package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// testSchedules: periodic schedules on a frozen clock, through the
// library and the leader's schedules service: a cron schedule in a time
// zone across a DST change, an interval schedule, each missed-tick policy
// after downtime, pause and resume, replace, remove, and the events.
func (s *suite) testSchedules(t *testing.T) {
	t.Run("CronAcrossDST", s.schedCronDST)
	t.Run("Interval", s.schedInterval)
	t.Run("MissedPolicies", s.schedMissed)
	t.Run("PauseReplaceRemove", s.schedLifecycle)
}

// schedBundle is a bundle on a frozen clock set to at, with the schedules
// service.
func (s *suite) schedBundle(t *testing.T, at time.Time) (*bundle, maintenance.Service) {
	b := s.setup(t, nil)
	b.clock.freeze()
	b.clock.Advance(at.Sub(b.clock.Now()))
	return b, maintenance.NewSchedules(b.c.Engine(), time.Second)
}

func (b *bundle) addSchedule(p backstop.ScheduleParams) *backstop.ScheduleInfo {
	b.t.Helper()
	in, err := b.c.AddSchedule(b.ctx, p)
	if err != nil {
		b.t.Fatalf("add schedule %s: %v", p.Name, err)
	}
	return in
}

func (b *bundle) schedule(name string) *backstop.ScheduleInfo {
	b.t.Helper()
	in, err := b.c.Schedule(b.ctx, name)
	if err != nil {
		b.t.Fatalf("schedule %s: %v", name, err)
	}
	return in
}

// round runs one schedules round at the clock's time.
func (b *bundle) round(svc maintenance.Service) {
	b.t.Helper()
	if err := svc.RunOnce(b.ctx); err != nil {
		b.t.Fatalf("schedules round: %v", err)
	}
}

// ticks are the run_at of the tasks of queue q, which each schedule here
// has its own of, oldest first; each task's key must name its tick.
func (b *bundle) ticks(q string) []time.Time {
	b.t.Helper()
	ts, err := b.store.List(b.ctx, store.ListFilter{Queue: q, Limit: 1000})
	if err != nil {
		b.t.Fatal(err)
	}
	out := make([]time.Time, len(ts))
	for i, tk := range ts {
		out[i] = tk.RunAt.UTC()
		if want := maintenance.IdempotencyKey(q, tk.RunAt); tk.IdempotencyKey != want {
			b.t.Errorf("task %s: idempotency key %q, want %q", tk.ID, tk.IdempotencyKey, want)
		}
	}
	return out
}

// schedEvents requires n events of type typ whose subject is name (read
// once they are final: on PostgreSQL, once no older transaction runs).
func (b *bundle) schedEvents(typ, name string, n int) {
	b.t.Helper()
	count := func() int {
		p, err := b.store.ReadEvents(b.ctx, store.EventQuery{Stream: store.Stream{Kind: store.StreamType, Value: typ}, Limit: 1000})
		if err != nil {
			b.t.Fatal(err)
		}
		c := 0
		for _, e := range p.Events {
			if e.Subject == name {
				c++
			}
		}
		return c
	}
	testwait.For(b.t, fmt.Sprintf("%d %s events of %s", n, typ, name), func() bool { return count() >= n })
	eq(b.t, typ+" events of "+name, count(), n)
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// schedCronDST: 09:00 in Europe/Paris is 08:00 UTC on Saturday 28 March
// 2026 and 07:00 UTC on Sunday 29 March, after the change to summer time;
// the stored next tick and the enqueued tasks follow it.
func (s *suite) schedCronDST(t *testing.T) {
	b, svc := s.schedBundle(t, utc("2026-03-27T12:00:00Z"))
	in := b.addSchedule(backstop.ScheduleParams{Name: "paris", Cron: "0 9 * * *", TZ: "Europe/Paris", Queue: "paris", Kind: "report"})
	eq(t, "first tick", in.NextRunAt, utc("2026-03-28T08:00:00Z"))
	eq(t, "schedule", in.Schedule, "cron 0 9 * * * Europe/Paris")

	b.clock.Advance(utc("2026-03-28T07:59:59Z").Sub(b.clock.Now()))
	b.round(svc)
	eq(t, "tasks before the tick", len(b.ticks("paris")), 0)
	b.clock.Advance(time.Second + 30*time.Second)
	b.round(svc)
	b.round(svc) // a second round of the same time enqueues nothing more
	eq(t, "ticks on Saturday", b.ticks("paris"), []time.Time{utc("2026-03-28T08:00:00Z")})
	in = b.schedule("paris")
	eq(t, "next tick after the DST change", in.NextRunAt, utc("2026-03-29T07:00:00Z"))
	if in.LastRunAt == nil || !in.LastRunAt.Equal(utc("2026-03-28T08:00:00Z")) || in.LastOutcome != "enqueued" || in.LastTaskID == "" {
		t.Fatalf("after Saturday's tick: %+v", in)
	}
	b.clock.Advance(utc("2026-03-29T07:00:00Z").Sub(b.clock.Now()))
	b.round(svc)
	eq(t, "ticks on Sunday", b.ticks("paris"), []time.Time{utc("2026-03-28T08:00:00Z"), utc("2026-03-29T07:00:00Z")})
	eq(t, "next tick", b.schedule("paris").NextRunAt, utc("2026-03-30T07:00:00Z"))
	b.schedEvents(store.EventScheduleTicked, "paris", 2)
	b.schedEvents(store.EventScheduleSaved, "paris", 1)
}

// schedInterval: every 90s ticks on its multiples; each round enqueues the
// ticks that came, one task each.
func (s *suite) schedInterval(t *testing.T) {
	b, svc := s.schedBundle(t, utc("2026-06-01T10:00:10Z"))
	in := b.addSchedule(backstop.ScheduleParams{Name: "iv", Every: 90 * time.Second, Queue: "iv", Kind: "k",
		Payload: []byte(`{"n":1}`), Attributes: map[string]string{"team": "ops"}})
	first := in.NextRunAt
	eq(t, "first tick is a multiple of 90s", first.Unix()%90, int64(0))
	var want []time.Time
	for i := range 4 {
		b.clock.Advance(first.Add(time.Duration(i)*90*time.Second).Sub(b.clock.Now()) + time.Second)
		b.round(svc)
		want = append(want, first.Add(time.Duration(i)*90*time.Second))
	}
	eq(t, "ticks", b.ticks("iv"), want)
	tk := b.get(b.schedule("iv").LastTaskID)
	eq(t, "task payload", string(tk.Payload), `{"n":1}`)
	eq(t, "task attribute", tk.Attributes["team"], "ops")
}

// schedMissed: ten minutes and a half after the first tick of three
// every-minute schedules, one round: the tick 30s old is on time and
// enqueued by each; the ten older ones were missed: skip enqueues none of
// them (ten schedule.skipped events), once the latest (nine skipped), all
// every one.
func (s *suite) schedMissed(t *testing.T) {
	b, svc := s.schedBundle(t, utc("2026-06-01T10:00:10Z"))
	var first time.Time
	for _, m := range []string{"skip", "once", "all"} {
		first = b.addSchedule(backstop.ScheduleParams{Name: m, Every: time.Minute, Missed: m, Queue: m, Kind: "k"}).NextRunAt
	}
	b.clock.Advance(first.Add(10*time.Minute + 30*time.Second).Sub(b.clock.Now()))
	b.round(svc)
	tick := func(i int) time.Time { return first.Add(time.Duration(i) * time.Minute) }
	eq(t, "skip: ticks", b.ticks("skip"), []time.Time{tick(10)})
	b.schedEvents(store.EventScheduleSkipped, "skip", 10)
	eq(t, "once: ticks", b.ticks("once"), []time.Time{tick(9), tick(10)})
	b.schedEvents(store.EventScheduleSkipped, "once", 9)
	var all []time.Time
	for i := range 11 {
		all = append(all, tick(i))
	}
	eq(t, "all: ticks", b.ticks("all"), all)
	b.schedEvents(store.EventScheduleSkipped, "all", 0)
	for _, m := range []string{"skip", "once", "all"} {
		in := b.schedule(m)
		if !in.NextRunAt.Equal(tick(11)) || in.LastOutcome != "enqueued" || !in.LastRunAt.Equal(tick(10)) {
			t.Errorf("%s after the round: %+v", m, in)
		}
	}
}

// schedLifecycle: a paused schedule does not tick; resumed, it ticks from
// its next tick after now (the pause's ticks are not enqueued); add with
// an existing name conflicts, replace keeps the next tick when the timing
// is unchanged and moves it when it changed; remove forgets it.
func (s *suite) schedLifecycle(t *testing.T) {
	b, svc := s.schedBundle(t, utc("2026-06-01T10:00:10Z"))
	first := b.addSchedule(backstop.ScheduleParams{Name: "p", Every: time.Minute, Queue: "p", Kind: "k"}).NextRunAt
	if _, err := b.c.AddSchedule(b.ctx, backstop.ScheduleParams{Name: "p", Every: time.Hour, Queue: "p", Kind: "k"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("add again: %v, want a conflict", err)
	}
	if in, err := b.c.PauseSchedule(b.ctx, "p"); err != nil || !in.Paused {
		t.Fatalf("pause: %+v %v", in, err)
	}
	b.clock.Advance(first.Add(5 * time.Minute).Sub(b.clock.Now()))
	b.round(svc)
	eq(t, "ticks while paused", len(b.ticks("p")), 0)
	in, err := b.c.ResumeSchedule(b.ctx, "p")
	if err != nil || in.Paused || !in.NextRunAt.Equal(first.Add(6*time.Minute)) {
		t.Fatalf("resume: %+v %v, want next %s", in, err, first.Add(6*time.Minute))
	}
	b.round(svc)
	eq(t, "ticks right after resume", len(b.ticks("p")), 0)
	b.schedEvents(store.EventSchedulePaused, "p", 1)
	b.schedEvents(store.EventScheduleResumed, "p", 1)

	in = b.addSchedule(backstop.ScheduleParams{Name: "p", Every: time.Minute, Queue: "p", Kind: "k2", Replace: true})
	if in.Kind != "k2" || !in.NextRunAt.Equal(first.Add(6*time.Minute)) {
		t.Fatalf("replace with the same timing: %+v", in)
	}
	in = b.addSchedule(backstop.ScheduleParams{Name: "p", Cron: "0 * * * *", Queue: "p", Kind: "k2", Replace: true})
	if !in.NextRunAt.Equal(utc("2026-06-01T11:00:00Z")) {
		t.Fatalf("replace with a new timing: %+v", in)
	}
	if err := b.c.RemoveSchedule(b.ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.Schedule(b.ctx, "p"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after remove: %v", err)
	}
	if err := b.c.RemoveSchedule(b.ctx, "p"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("remove again: %v", err)
	}
	b.schedEvents(store.EventScheduleRemoved, "p", 1)
}
