package engine

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Limit is a cluster-wide concurrency or rate limit (store/limits.go).
type Limit = store.Limit

// MaxLimitConcurrency bounds a limit's concurrency: more running tasks at
// once than any cluster holds is a typo, not a limit.
const MaxLimitConcurrency = 1_000_000

// Bounds of a rate limit: more starts a second, or a larger burst, than
// any cluster makes is a typo; fewer than one start a day is not a rate.
const (
	MaxLimitRate  = 1_000_000
	MinLimitRate  = 1.0 / 86400
	MaxLimitBurst = 1_000_000
)

// LimitDefaults fills a rate limit's burst when it has none: one second's
// starts, max(1, ceil(Rate)).
func LimitDefaults(l Limit) Limit {
	if l.Rate > 0 && l.Burst == 0 {
		l.Burst = max(1, int(math.Ceil(min(l.Rate, MaxLimitBurst))))
	}
	return l
}

// LimitsRefresh is how often the engine rereads which queues have limits
// and which are fair (claimsettings.go). A queue with neither claims with
// the plain claim, which never reads them; a limit or fairness set by
// another process binds this one's claims within this long (at once when
// set through this engine).
const LimitsRefresh = time.Second

// ValidateLimit checks a limit before it is stored; the error names the
// field.
func ValidateLimit(l Limit) error {
	if err := ValidName(l.Name); err != nil {
		return Invalid("name", "%v", err)
	}
	if err := ValidName(l.Queue); err != nil {
		return Invalid("queue", "%v", err)
	}
	if l.Kind != "" {
		if err := ValidName(l.Kind); err != nil {
			return Invalid("kind", "%v", err)
		}
	}
	if l.Per != "" && !ValidAttrKey(l.Per) {
		return Invalid("per", "%q must be an attribute key: 1-64 characters of letters, digits, '_', '.' or '-', starting with a letter or '_'", l.Per)
	}
	switch {
	case l.Concurrency != 0 && l.Rate != 0:
		return Invalid("rate", "a limit is a concurrency limit or a rate limit, not both: give concurrency or rate")
	case l.Rate != 0 || l.Burst != 0:
		if math.IsNaN(l.Rate) || l.Rate < MinLimitRate || l.Rate > MaxLimitRate {
			return Invalid("rate", "%v: want starts per second from %g (one a day) to %d", l.Rate, MinLimitRate, MaxLimitRate)
		}
		if l.Burst < 1 || l.Burst > MaxLimitBurst {
			return Invalid("burst", "%d: want a whole number from 1 to %d (default: max(1, ceil(rate)))", l.Burst, MaxLimitBurst)
		}
	case l.Concurrency < 1 || l.Concurrency > MaxLimitConcurrency:
		return Invalid("concurrency", "%d: want a whole number from 1 to %d", l.Concurrency, MaxLimitConcurrency)
	}
	return nil
}

// WithLimitWait sets Waiting on the pending tasks a full budget holds
// back, the first such limit by name: "concurrency limit NAME [PER=VALUE]
// RUNNING/CONCURRENCY" or "rate limit NAME [PER=VALUE] RATE/s". A budget
// is full as the claim sees it: its running count has reached the limit,
// its bucket holds less than a whole token at the engine's now.
func (e *Engine) WithLimitWait(ctx context.Context, tasks []*Task) error {
	var waiting []*Task
	for _, t := range tasks {
		if t.State == bt.StatePending && e.limited(ctx, t.Queue) {
			waiting = append(waiting, t)
		}
	}
	if len(waiting) == 0 {
		return nil
	}
	limits, err := e.store.ListLimits(ctx)
	if err != nil {
		return err
	}
	uses, err := e.store.LimitUses(ctx, e.Now())
	if err != nil {
		return err
	}
	full := map[store.Budget]store.LimitUse{}
	for _, u := range uses {
		if u.Waiting > 0 {
			full[store.Budget{Limit: u.Limit, Value: u.Value}] = u
		}
	}
	for _, t := range waiting {
		for _, l := range limits {
			if !l.Applies(t.Queue, t.Kind) {
				continue
			}
			v := l.Value(t.Attributes)
			if u, ok := full[store.Budget{Limit: l.Name, Value: v}]; ok {
				t.Waiting = LimitWaitText(l, v, u.Running)
				break
			}
		}
	}
	return nil
}

// LimitWaitText is why a task waits on limit l's budget of value v with n
// running (n matters to a concurrency limit only).
func LimitWaitText(l Limit, v string, n int) string {
	budget := ""
	if l.Per != "" {
		budget = " " + l.Per + "=" + v
	}
	if l.Rate > 0 {
		return fmt.Sprintf("rate limit %s%s %s/s", l.Name, budget, FormatRate(l.Rate))
	}
	return fmt.Sprintf("concurrency limit %s%s %d/%d", l.Name, budget, n, l.Concurrency)
}

// FormatRate writes a rate limit's starts per second as its shortest
// decimal ("50", "0.5").
func FormatRate(r float64) string { return strconv.FormatFloat(r, 'f', -1, 64) }

// LimitStatus is a limit with its use: InUse running tasks of its scope
// (all values), Waiting pending ones its full budgets hold back, and with
// Per, each value's budget that has running or pending tasks. A rate
// limit also has its Burst and Tokens: those its bucket holds now (with
// Per, the fewest any budget in Budgets holds, each of which has its own;
// a budget not in Budgets holds Burst).
type LimitStatus struct {
	Name string `json:"name"`
	// Scope is "queue=Q[ kind=K][ per=ATTR]".
	Scope string `json:"scope"`
	// Type is the kind of limit: "concurrency" or "rate".
	Type string `json:"type"`
	// Value is the limit: running tasks at once, or starts per second.
	Value   float64          `json:"value"`
	Burst   int              `json:"burst,omitempty"`
	Tokens  *float64         `json:"tokens,omitempty"`
	InUse   int              `json:"in_use"`
	Waiting int              `json:"waiting"`
	Queue   string           `json:"queue"`
	Kind    string           `json:"kind,omitempty"`
	Per     string           `json:"per,omitempty"`
	Budgets []store.LimitUse `json:"budgets,omitempty"`
}

// LimitScope is a limit's scope as LimitStatus shows it.
func LimitScope(l Limit) string {
	s := "queue=" + l.Queue
	if l.Kind != "" {
		s += " kind=" + l.Kind
	}
	if l.Per != "" {
		s += " per=" + l.Per
	}
	return s
}

// LimitStatuses reads every limit with its use, by name.
func (e *Engine) LimitStatuses(ctx context.Context) ([]LimitStatus, error) {
	limits, err := e.store.ListLimits(ctx)
	if err != nil {
		return nil, err
	}
	uses, err := e.store.LimitUses(ctx, e.Now())
	if err != nil {
		return nil, err
	}
	out := make([]LimitStatus, len(limits))
	for i, l := range limits {
		st := LimitStatus{Name: l.Name, Scope: LimitScope(l), Type: l.Type(), Value: float64(l.Concurrency),
			Queue: l.Queue, Kind: l.Kind, Per: l.Per}
		if l.Rate > 0 {
			tokens := float64(l.Burst)
			st.Value, st.Burst, st.Tokens = l.Rate, l.Burst, &tokens
		}
		for _, u := range uses {
			if u.Limit != l.Name {
				continue
			}
			st.InUse += u.Running
			st.Waiting += u.Waiting
			if u.Tokens != nil && *u.Tokens < *st.Tokens {
				*st.Tokens = *u.Tokens
			}
			if l.Per != "" {
				st.Budgets = append(st.Budgets, u)
			}
		}
		out[i] = st
	}
	return out, nil
}
