package backstoptype

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Duration is a time.Duration that reads and writes JSON as a Go duration
// string ("1.5s"), and also accepts a number of nanoseconds.
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err2 := json.Unmarshal(b, &n); err2 != nil {
			return fmt.Errorf("duration must be a string like \"10s\": %s", b)
		}
		*d = Duration(n)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q", s)
	}
	*d = Duration(v)
	return nil
}

// RetryPolicy decides how long to wait before the next attempt. Either
// Schedule is set (explicit delays, the last one repeating) or the policy is
// exponential with full jitter: min(Base·Factor^n, Max)·(0.5+rand).
type RetryPolicy struct {
	Schedule []Duration `json:"schedule,omitempty"`
	Base     Duration   `json:"base,omitempty"`   // default 1s
	Factor   float64    `json:"factor,omitempty"` // default 2
	Max      Duration   `json:"max,omitempty"`    // default 1h
	// Jitter disables randomisation when set to false explicitly; nil means on.
	Jitter *bool `json:"jitter,omitempty"`
}

// DefaultRetryPolicy is used when neither task, kind nor queue sets one.
var DefaultRetryPolicy = RetryPolicy{Base: Duration(time.Second), Factor: 2, Max: Duration(time.Hour)}

// Validate names the first thing wrong with the policy.
func (p *RetryPolicy) Validate() error {
	for i, d := range p.Schedule {
		if d < 0 {
			return fmt.Errorf("retry schedule entry %d is negative (%s)", i+1, d)
		}
	}
	if p.Base < 0 || p.Max < 0 {
		return errors.New("retry base and max must not be negative")
	}
	if p.Factor != 0 && (p.Factor < 1 || math.IsNaN(p.Factor) || math.IsInf(p.Factor, 0)) {
		return fmt.Errorf("retry factor %v must be a finite number, at least 1", p.Factor)
	}
	// A schedule replaces the exponential policy: base, factor and max
	// beside it would be silently ignored, so they are refused.
	if len(p.Schedule) > 0 && (p.Base != 0 || p.Factor != 0 || p.Max != 0) {
		return errors.New("retry: give a schedule or base/factor/max, not both")
	}
	if base, maxD := cmp.Or(p.Base, DefaultRetryPolicy.Base), cmp.Or(p.Max, DefaultRetryPolicy.Max); base > maxD {
		return fmt.Errorf("retry base %s is greater than max %s", base, maxD)
	}
	return nil
}

// Delay returns the wait after the given failed attempt (1-based). rnd is a
// value in [0,1) used for jitter.
func (p *RetryPolicy) Delay(attempt int, rnd float64) time.Duration {
	attempt = max(attempt, 1)
	if len(p.Schedule) > 0 {
		i := min(attempt-1, len(p.Schedule)-1)
		return time.Duration(p.Schedule[i])
	}
	base := cmp.Or(time.Duration(p.Base), time.Second)
	factor := cmp.Or(p.Factor, 2)
	maxD := cmp.Or(time.Duration(p.Max), time.Hour)
	d := float64(base) * math.Pow(factor, float64(attempt-1))
	if d > float64(maxD) || math.IsInf(d, 0) {
		d = float64(maxD)
	}
	if p.Jitter == nil || *p.Jitter {
		d *= 0.5 + rnd
	}
	if d >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(d)
}

// ParseSchedule reads "10s,20s,30s" into a schedule.
func ParseSchedule(s string) ([]Duration, error) {
	var out []Duration
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, fmt.Errorf("retry schedule %q has an empty entry", s)
		}
		d, err := time.ParseDuration(part)
		if err != nil {
			return nil, fmt.Errorf("retry schedule entry %q is not a duration", part)
		}
		if d < 0 {
			return nil, fmt.Errorf("retry schedule entry %q is negative", part)
		}
		out = append(out, Duration(d))
	}
	return out, nil
}
