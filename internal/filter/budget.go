package filter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Budget bounds the Go-side evaluation of a where expression for one
// request (or one batch of a bulk job): Cost is CEL cost units summed over
// every task evaluated, Time the wall time from the budget's start to the
// last evaluation, the reads of the tasks to evaluate included. A where in
// the SQL subset is evaluated by the database and costs nothing here.
type Budget struct {
	// Cost: CEL cost units (about one per operation and per element a
	// comprehension visits). Default: DefaultCost.
	Cost uint64
	// Time: wall time. Default: DefaultTime.
	Time time.Duration
}

const (
	// DefaultCost is Budget.Cost's default: one to two CPU-seconds of CEL.
	DefaultCost uint64 = 10_000_000
	// DefaultTime is Budget.Time's default.
	DefaultTime = 10 * time.Second
)

// WithDefaults is b with its zero fields at their defaults.
func (b Budget) WithDefaults() Budget {
	if b.Cost == 0 {
		b.Cost = DefaultCost
	}
	if b.Time <= 0 {
		b.Time = DefaultTime
	}
	return b
}

// ErrBudget marks an evaluation stopped because its budget was spent
// (BudgetError).
var ErrBudget = errors.New("where budget spent")

// BudgetError says which budget a where's evaluation spent: "cost" or
// "time", and after how many tasks.
type BudgetError struct {
	Budget    string // cost or time
	Limit     Budget
	Evaluated int
	// OneTask: a single task's evaluation passed the per-task cost limit
	// (PerTaskCost) on its own.
	OneTask bool
}

func (e *BudgetError) Error() string {
	narrow := "narrow the other filters (queue, kind, state, since) or keep the where in the SQL subset"
	switch {
	case e.OneTask:
		return fmt.Sprintf("the where expression's cost budget (%d per task) is spent: evaluating it on one task costs more than that; %s", PerTaskCost, narrow)
	case e.Budget == "time":
		return fmt.Sprintf("the where expression's time budget (%s, limits.where_time) is spent after evaluating it on %d tasks; %s, or raise limits.where_time",
			e.Limit.Time, e.Evaluated, narrow)
	default:
		return fmt.Sprintf("the where expression's cost budget (%d, limits.where_cost) is spent after evaluating it on %d tasks; %s, or raise limits.where_cost",
			e.Limit.Cost, e.Evaluated, narrow)
	}
}

func (e *BudgetError) Is(target error) bool { return target == ErrBudget }

// meter is the state of one budget: what was spent, until when it runs.
type meter struct {
	b        Budget
	deadline time.Time
	mu       sync.Mutex
	spent    uint64
	n        int
}

type meterKey struct{}

// WithBudget returns ctx carrying a fresh budget b (its time runs from
// now): every Go-side evaluation under it (Scan, Each, Eval) draws on it.
func WithBudget(ctx context.Context, b Budget) context.Context {
	b = b.WithDefaults()
	return context.WithValue(ctx, meterKey{}, &meter{b: b, deadline: time.Now().Add(b.Time)})
}

// HasBudget reports whether ctx carries a budget (WithBudget).
func HasBudget(ctx context.Context) bool {
	_, ok := ctx.Value(meterKey{}).(*meter)
	return ok
}

// meterOf is ctx's budget, or a fresh default one.
func meterOf(ctx context.Context) *meter {
	if m, ok := ctx.Value(meterKey{}).(*meter); ok {
		return m
	}
	b := Budget{}.WithDefaults()
	return &meter{b: b, deadline: time.Now().Add(b.Time)}
}

// bound is ctx ending at the budget's deadline too.
func (m *meter) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithDeadline(ctx, m.deadline)
}

// spentErr is the error of a bounded context that ended: the parent's own
// (the client went away) or the time budget's.
func (m *meter) spentErr(parent context.Context) error {
	if err := parent.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return &BudgetError{Budget: "time", Limit: m.b, Evaluated: m.n}
}

// charge adds one evaluation's cost.
func (m *meter) charge(cost uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n++
	m.spent += cost
	if m.spent > m.b.Cost {
		return &BudgetError{Budget: "cost", Limit: m.b, Evaluated: m.n}
	}
	return nil
}
