// Package schedule is the timing of periodic tasks: a cron expression
// (parsed by robfig/cron/v3, seconds optional, in a time zone) or a fixed
// interval, the ticks it makes, and the missed-tick policy that decides
// which due ticks enqueue a task and which are skipped. It is pure: it
// reads no clock and writes nothing; the maintenance service applies its
// Plan in the store.
package schedule

import (
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // time zones resolve on hosts without a zoneinfo database

	"github.com/robfig/cron/v3"
)

// Missed is a schedule's policy for ticks missed while no leader ran it.
type Missed string

// The missed-tick policies.
const (
	// MissedSkip (the default) enqueues none of the missed ticks; each is
	// reported skipped.
	MissedSkip Missed = "skip"
	// MissedOnce enqueues one task, for the latest missed tick; the others
	// are reported skipped.
	MissedOnce Missed = "once"
	// MissedAll enqueues every missed tick, the newest MaxCatchUp of them;
	// older ones are reported skipped.
	MissedAll Missed = "all"
)

// ParseMissed reads a policy name; "" is MissedSkip.
func ParseMissed(s string) (Missed, error) {
	switch Missed(s) {
	case "":
		return MissedSkip, nil
	case MissedSkip, MissedOnce, MissedAll:
		return Missed(s), nil
	}
	return "", fmt.Errorf("missed: %q is not one of skip, once, all", s)
}

const (
	// MaxCatchUp bounds the ticks one plan enqueues, and the skipped ticks
	// it lists one by one (the rest are counted).
	MaxCatchUp = 100
	// Late is how late a tick may be enqueued and still be on time: a due
	// tick younger than this (a leader change, a slow round) is enqueued
	// whatever the policy; an older one is missed and the policy decides.
	Late = time.Minute
	// MinEvery is the shortest interval, and the shortest period a cron
	// expression may have between two ticks it is checked on.
	MinEvery = time.Second
	// maxCount bounds the ticks counted through when a schedule was down
	// for very long (a cron one is walked tick by tick).
	maxCount = 1_000_000
)

// Spec is a schedule as declared: Every, or Cron with an optional TZ (an
// IANA zone name; default UTC).
type Spec struct {
	Every time.Duration
	Cron  string
	TZ    string
}

// Schedule is a parsed Spec.
type Schedule struct {
	spec  Spec
	every time.Duration
	cron  cron.Schedule
}

var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// FieldError is a refused Spec, naming its field (every, cron, tz).
type FieldError struct {
	Field, Msg string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Parse checks a Spec: exactly one of Every (at least MinEvery) and Cron;
// TZ only with Cron and a known zone; a cron expression that ever ticks.
func Parse(s Spec) (sch *Schedule, err error) {
	switch {
	case s.Every != 0 && s.Cron != "":
		return nil, &FieldError{"every", "give either an interval or a cron expression, not both"}
	case s.Every == 0 && strings.TrimSpace(s.Cron) == "":
		return nil, &FieldError{"every", "a schedule needs an interval (every) or a cron expression (cron)"}
	case s.Every != 0:
		if s.TZ != "" {
			return nil, &FieldError{"tz", "a time zone applies to a cron expression, not to an interval"}
		}
		if s.Every < MinEvery {
			return nil, &FieldError{"every", fmt.Sprintf("%s is shorter than %s", s.Every, MinEvery)}
		}
		if s.Every%time.Second != 0 {
			return nil, &FieldError{"every", fmt.Sprintf("%s is not a whole number of seconds", s.Every)}
		}
		return &Schedule{spec: s, every: s.Every}, nil
	}
	expr := strings.TrimSpace(s.Cron)
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return nil, &FieldError{"cron", "give the time zone as tz, not inside the expression"}
	}
	if len(expr) > 256 {
		return nil, &FieldError{"cron", "longer than 256 characters"}
	}
	loc := time.UTC
	if s.TZ != "" {
		if loc, err = time.LoadLocation(s.TZ); err != nil || s.TZ == "Local" {
			return nil, &FieldError{"tz", fmt.Sprintf("unknown time zone %q", s.TZ)}
		}
	}
	defer func() { // the parser is trusted, not its every corner
		if r := recover(); r != nil {
			sch, err = nil, &FieldError{"cron", fmt.Sprintf("%q: %v", expr, r)}
		}
	}()
	c, err := parser.Parse(expr)
	if err != nil {
		return nil, &FieldError{"cron", fmt.Sprintf("%q: %v", expr, err)}
	}
	switch c := c.(type) {
	case *cron.SpecSchedule:
		c.Location = loc
	case cron.ConstantDelaySchedule: // @every D
		if c.Delay < MinEvery {
			return nil, &FieldError{"cron", fmt.Sprintf("%q: ticks more often than every %s", expr, MinEvery)}
		}
	}
	s.Cron = expr
	sch = &Schedule{spec: s, cron: c}
	if sch.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, &FieldError{"cron", fmt.Sprintf("%q never ticks", expr)}
	}
	return sch, nil
}

// Spec is the schedule as parsed (a cron expression trimmed).
func (s *Schedule) Spec() Spec { return s.spec }

// String is the schedule as a person reads it: "every 1m0s", "cron 0 9 *
// * * Europe/Paris".
func (s *Schedule) String() string {
	if s.every > 0 {
		return "every " + s.every.String()
	}
	tz := s.spec.TZ
	if tz == "" {
		tz = "UTC"
	}
	return "cron " + s.spec.Cron + " " + tz
}

// First is the first tick after now: the cron expression's next time, or
// the next multiple of the interval (counted from the zero time, so an
// interval that divides a day ticks on the clock: every 1m at each minute).
func (s *Schedule) First(now time.Time) time.Time {
	if s.every > 0 {
		return now.Truncate(s.every).Add(s.every).UTC()
	}
	return s.Next(now)
}

// Next is the first tick strictly after t (zero if a cron expression has
// none within five years). Interval ticks are anchored on t.
func (s *Schedule) Next(t time.Time) time.Time {
	if s.every > 0 {
		return t.Add(s.every).UTC()
	}
	return s.cron.Next(t).UTC()
}

// Plan is what to do with a schedule's due ticks at one time.
type Plan struct {
	// Fire are the ticks to enqueue, oldest first (at most MaxCatchUp).
	Fire []time.Time
	// Skip are the ticks skipped, oldest first, listed up to MaxCatchUp;
	// Skipped counts them all.
	Skip    []time.Time
	Skipped int
	// LastSkipped is the newest tick skipped (zero: none).
	LastSkipped time.Time
	// Next is the schedule's next tick after the plan: after now.
	Next time.Time
}

// Plan decides, at now, the ticks of a schedule whose next tick is next:
// the ticks from next up to now are due; those within Late of now are on
// time and enqueued; older ones are missed and the policy decides (skip:
// none enqueued; once: the latest missed one; all: every one). At most
// MaxCatchUp are enqueued, the newest; the rest are skipped.
func (s *Schedule) Plan(next, now time.Time, missed Missed) Plan {
	var p Plan
	if next.IsZero() || next.After(now) {
		p.Next = next
		return p
	}
	var due []time.Time // the newest MaxCatchUp+1 due ticks, oldest first
	var skippedEarly []time.Time
	var skippedCount int
	t := next
	if s.every > 0 {
		// Jump over ticks beyond what is kept, arithmetically.
		n := int64(now.Sub(next)/s.every) + 1 // due ticks
		if keep := int64(2*MaxCatchUp + 2); n > keep {
			jump := n - keep
			for i := int64(0); i < min(jump, MaxCatchUp); i++ {
				skippedEarly = append(skippedEarly, next.Add(time.Duration(i)*s.every).UTC())
			}
			skippedCount = int(min(jump, maxCount))
			t = next.Add(time.Duration(jump) * s.every).UTC()
		}
	}
	counted := 0
	for !t.IsZero() && !t.After(now) {
		if counted >= maxCount { // down for ages: count no further
			t = s.Next(now)
			break
		}
		counted++
		due = append(due, t)
		if len(due) > 2*MaxCatchUp+2 {
			if len(skippedEarly) < MaxCatchUp {
				skippedEarly = append(skippedEarly, due[0])
			}
			skippedCount++
			due = due[1:]
		}
		t = s.Next(t)
	}
	p.Next = t
	var missedTicks, onTime []time.Time
	for _, d := range due {
		if now.Sub(d) > Late {
			missedTicks = append(missedTicks, d)
		} else {
			onTime = append(onTime, d)
		}
	}
	var skip []time.Time
	switch missed {
	case MissedAll:
		onTime = append(missedTicks, onTime...)
	case MissedOnce:
		if len(missedTicks) > 0 {
			skip = missedTicks[:len(missedTicks)-1]
			onTime = append([]time.Time{missedTicks[len(missedTicks)-1]}, onTime...)
		}
	default:
		skip = missedTicks
	}
	if over := len(onTime) - MaxCatchUp; over > 0 {
		skip = append(skip, onTime[:over]...)
		onTime = onTime[over:]
	}
	p.Fire = onTime
	p.Skipped = skippedCount + len(skip)
	p.Skip = skippedEarly
	if len(skip) > 0 {
		p.LastSkipped = skip[len(skip)-1]
	} else if len(skippedEarly) > 0 {
		p.LastSkipped = skippedEarly[len(skippedEarly)-1]
	}
	for _, t := range skip {
		if len(p.Skip) >= MaxCatchUp {
			break
		}
		p.Skip = append(p.Skip, t)
	}
	return p
}
