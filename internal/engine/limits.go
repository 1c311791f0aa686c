package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Limit is a cluster-wide concurrency limit (store/limits.go).
type Limit = store.Limit

// MaxLimitConcurrency bounds a limit's concurrency: more running tasks at
// once than any cluster holds is a typo, not a limit.
const MaxLimitConcurrency = 1_000_000

// LimitsRefresh is how often the engine rereads which queues have limits.
// A queue with none claims with the plain claim, which never reads them;
// a limit set by another process binds this one's claims within this
// long (at once for a limit set through this engine).
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
	if l.Concurrency < 1 || l.Concurrency > MaxLimitConcurrency {
		return Invalid("concurrency", "%d: want a whole number from 1 to %d", l.Concurrency, MaxLimitConcurrency)
	}
	return nil
}

// limitedQueues caches which queues have limits, reread every
// LimitsRefresh (real time: a frozen test clock must not freeze it).
type limitedQueues struct {
	mu     sync.Mutex
	read   time.Time // zero: read on the next claim
	queues map[string]bool
}

// limited tells whether queue has limits: the claim then takes the
// limited path. When the limits cannot be read it says yes (the limited
// claim reads them again, in its transaction, and claims as usual when
// there are none).
func (e *Engine) limited(ctx context.Context, queue string) bool {
	c := &e.limits
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.read.IsZero() || time.Since(c.read) >= LimitsRefresh {
		ls, err := e.store.ListLimits(ctx)
		if err != nil {
			return true
		}
		c.queues = map[string]bool{}
		for _, l := range ls {
			c.queues[l.Queue] = true
		}
		c.read = time.Now()
	}
	return c.queues[queue]
}

// LimitsChanged makes the next claim reread which queues have limits (a
// limit set or removed through this engine binds at once).
func (e *Engine) LimitsChanged() {
	e.limits.mu.Lock()
	e.limits.read = time.Time{}
	e.limits.mu.Unlock()
}

// WithLimitWait sets Waiting on the pending tasks a full budget of a
// concurrency limit holds back: "concurrency limit NAME [PER=VALUE]
// RUNNING/CONCURRENCY", the first such limit by name.
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
	uses, err := e.store.LimitUses(ctx)
	if err != nil {
		return err
	}
	running := map[store.Budget]int{}
	for _, u := range uses {
		running[store.Budget{Limit: u.Limit, Value: u.Value}] = u.Running
	}
	for _, t := range waiting {
		for _, l := range limits {
			if !l.Applies(t.Queue, t.Kind) {
				continue
			}
			v := l.Value(t.Attributes)
			if n := running[store.Budget{Limit: l.Name, Value: v}]; n >= l.Concurrency {
				t.Waiting = LimitWaitText(l, v, n)
				break
			}
		}
	}
	return nil
}

// LimitWaitText is why a task waits on limit l's budget of value v with n
// running.
func LimitWaitText(l Limit, v string, n int) string {
	if l.Per == "" {
		return fmt.Sprintf("concurrency limit %s %d/%d", l.Name, n, l.Concurrency)
	}
	return fmt.Sprintf("concurrency limit %s %s=%s %d/%d", l.Name, l.Per, v, n, l.Concurrency)
}

// LimitStatus is a limit with its use: InUse running tasks of its scope
// (all values), Waiting pending ones its full budgets hold back, and with
// Per, each value's budget that has running or pending tasks.
type LimitStatus struct {
	Name string `json:"name"`
	// Scope is "queue=Q[ kind=K][ per=ATTR]".
	Scope string `json:"scope"`
	// Type is the kind of limit: "concurrency".
	Type    string           `json:"type"`
	Value   int              `json:"value"`
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
	uses, err := e.store.LimitUses(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]LimitStatus, len(limits))
	for i, l := range limits {
		st := LimitStatus{Name: l.Name, Scope: LimitScope(l), Type: "concurrency", Value: l.Concurrency,
			Queue: l.Queue, Kind: l.Kind, Per: l.Per}
		for _, u := range uses {
			if u.Limit != l.Name {
				continue
			}
			st.InUse += u.Running
			st.Waiting += u.Waiting
			if l.Per != "" {
				st.Budgets = append(st.Budgets, u)
			}
		}
		out[i] = st
	}
	return out, nil
}
