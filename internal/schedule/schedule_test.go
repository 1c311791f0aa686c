package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func mustParse(t *testing.T, s Spec) *Schedule {
	t.Helper()
	sch, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// TestParseRefuses: each bad spec is refused with the field it names.
func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		spec  Spec
		field string
	}{
		{Spec{}, "every"},
		{Spec{Every: time.Minute, Cron: "* * * * *"}, "every"},
		{Spec{Every: time.Millisecond}, "every"},
		{Spec{Every: 1500 * time.Millisecond}, "every"},
		{Spec{Every: time.Minute, TZ: "Europe/Paris"}, "tz"},
		{Spec{Cron: "* * * * *", TZ: "Mars/Olympus"}, "tz"},
		{Spec{Cron: "* * * * *", TZ: "Local"}, "tz"},
		{Spec{Cron: "61 * * * *"}, "cron"},
		{Spec{Cron: "not a cron"}, "cron"},
		{Spec{Cron: "0 0 30 2 *"}, "cron"}, // February 30th
		{Spec{Cron: "CRON_TZ=UTC * * * * *"}, "cron"},
	} {
		_, err := Parse(c.spec)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("Parse(%+v) = %v, want an error naming %s", c.spec, err, c.field)
		}
	}
	if _, err := ParseMissed("never"); err == nil || !strings.Contains(err.Error(), "missed") {
		t.Errorf("ParseMissed(never) = %v", err)
	}
}

// TestNextCronSecondsAndZone: a six-field expression ticks on seconds; a
// five-field one in Europe/Paris ticks at 09:00 local, which is 08:00 UTC
// before the spring DST change and 07:00 UTC after it.
func TestNextCronSecondsAndZone(t *testing.T) {
	t.Parallel()
	s := mustParse(t, Spec{Cron: "*/15 * * * * *"})
	from := time.Date(2026, 3, 1, 10, 0, 7, 0, time.UTC)
	if got, want := s.Next(from), from.Truncate(time.Minute).Add(15*time.Second); !got.Equal(want) {
		t.Errorf("seconds: next %s, want %s", got, want)
	}
	p := mustParse(t, Spec{Cron: "0 9 * * *", TZ: "Europe/Paris"})
	sat := time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC) // the DST change is Sunday 29 March 2026
	got := p.Next(sat)
	if want := time.Date(2026, 3, 29, 7, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("after the DST change: next %s, want %s", got, want)
	}
	if got := p.Next(time.Date(2026, 3, 27, 12, 0, 0, 0, time.UTC)); !got.Equal(time.Date(2026, 3, 28, 8, 0, 0, 0, time.UTC)) {
		t.Errorf("before the DST change: next %s", got)
	}
	if s := p.String(); s != "cron 0 9 * * * Europe/Paris" {
		t.Errorf("String %q", s)
	}
}

// TestPlan: the ticks due at now are on time within Late and enqueued; the
// missed ones follow the policy; at most MaxCatchUp are enqueued.
func TestPlan(t *testing.T) {
	t.Parallel()
	s := mustParse(t, Spec{Every: time.Minute})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if f := s.First(t0.Add(90 * time.Second)); !f.Equal(t0.Add(2 * time.Minute)) {
		t.Errorf("first tick of every 1m at 00:01:30: %s", f)
	}
	if p := s.Plan(t0, t0.Add(-time.Second), MissedSkip); len(p.Fire) != 0 || !p.Next.Equal(t0) {
		t.Errorf("not due: %+v", p)
	}
	p := s.Plan(t0, t0.Add(30*time.Second), MissedSkip)
	if len(p.Fire) != 1 || !p.Fire[0].Equal(t0) || p.Skipped != 0 || !p.Next.Equal(t0.Add(time.Minute)) {
		t.Errorf("on time: %+v", p)
	}
	now := t0.Add(10*time.Minute + 30*time.Second) // ticks 0..10 due; 10 on time, 0..9 missed
	for _, c := range []struct {
		missed        Missed
		fire, skipped int
		firstFire     time.Time
	}{
		{MissedSkip, 1, 10, t0.Add(10 * time.Minute)},
		{MissedOnce, 2, 9, t0.Add(9 * time.Minute)},
		{MissedAll, 11, 0, t0},
	} {
		p := s.Plan(t0, now, c.missed)
		if len(p.Fire) != c.fire || p.Skipped != c.skipped || len(p.Skip) != c.skipped || !p.Fire[0].Equal(c.firstFire) ||
			!p.Next.Equal(t0.Add(11*time.Minute)) {
			t.Errorf("%s: fire %v skipped %d (%v) next %s", c.missed, p.Fire, p.Skipped, p.Skip, p.Next)
		}
	}
	// A year down: all enqueues the newest MaxCatchUp; the rest are counted.
	year := t0.Add(365 * 24 * time.Hour)
	p = s.Plan(t0, year, MissedAll)
	if len(p.Fire) != MaxCatchUp || !p.Fire[len(p.Fire)-1].Equal(year) || p.Skipped != 365*24*60+1-MaxCatchUp ||
		len(p.Skip) != MaxCatchUp || !p.Next.Equal(year.Add(time.Minute)) {
		t.Errorf("a year down: fire %d (last %s) skipped %d listed %d next %s", len(p.Fire), p.Fire[len(p.Fire)-1], p.Skipped, len(p.Skip), p.Next)
	}
	// A cron schedule down for a day at every second is walked, bounded.
	c := mustParse(t, Spec{Cron: "* * * * * *"})
	p = c.Plan(t0, t0.Add(24*time.Hour), MissedSkip)
	if len(p.Fire) != 61 || p.Skipped != 24*3600+1-61 || !p.Next.Equal(t0.Add(24*time.Hour+time.Second)) {
		t.Errorf("cron a day down: fire %d skipped %d next %s", len(p.Fire), p.Skipped, p.Next)
	}
}

// FuzzParse: no input makes Parse panic, and an accepted expression ticks
// after any time, later than it.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"* * * * *", "*/5 * * * * *", "0 9 * * MON-FRI", "@hourly", "@every 1h", "0 0 30 2 *",
		"61 * * * *", "*/0 * * * *", "1-", "L W * * *", "0 0 1 1 * 2026", ""} {
		f.Add(s, "Europe/Paris")
		f.Add(s, "")
	}
	f.Fuzz(func(t *testing.T, expr, tz string) {
		s, err := Parse(Spec{Cron: expr, TZ: tz})
		if err != nil {
			return
		}
		from := time.Date(2026, 3, 29, 0, 59, 59, 0, time.UTC)
		if n := s.Next(from); !n.After(from) && !n.IsZero() {
			t.Fatalf("%q %q: next %s not after %s", expr, tz, n, from)
		}
	})
}
