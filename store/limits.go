package store

import (
	"context"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// Limit is a cluster-wide concurrency limit, declared on a queue and
// optionally narrowed to one kind; with Per, each value of that attribute
// has its own budget (a task without the attribute counts under the empty
// value). At most Concurrency tasks of its scope (of one value, with Per)
// are running at once across every process claiming from the database:
// Claim admits a task only while its scope's running rows are fewer.
type Limit struct {
	Name        string    `json:"name"`
	Queue       string    `json:"queue"`
	Kind        string    `json:"kind,omitempty"` // empty: every kind of the queue
	Per         string    `json:"per,omitempty"`  // empty: one budget for the scope
	Concurrency int       `json:"concurrency"`
	CreatedAt   time.Time `json:"created_at"`
}

// Applies reports whether the limit's scope covers a task of queue and kind.
func (l Limit) Applies(queue, kind string) bool {
	return l.Queue == queue && (l.Kind == "" || l.Kind == kind)
}

// Value is the budget a task with these attributes counts against: the
// value of the Per attribute ("" without Per, or when the task lacks it).
func (l Limit) Value(attrs map[string]string) string {
	if l.Per == "" {
		return ""
	}
	return attrs[l.Per]
}

// LimitUse is how much of one budget of a limit is taken: Running tasks
// of its scope and value, Pending ones, and of those Waiting: held back by
// this budget, which is full (Pending when Running has reached the limit,
// else 0).
type LimitUse struct {
	Limit   string `json:"limit"`
	Value   string `json:"value"`
	Running int    `json:"running"`
	Pending int    `json:"pending"`
	Waiting int    `json:"waiting"`
}

// Limits stores the limits; Claim enforces them (ClaimParams.Limited).
type Limits interface {
	// SetLimit creates the limit or replaces the one of that name, and
	// appends ev (its audit event; none when ev.Type is empty) in the same
	// transaction.
	SetLimit(ctx context.Context, l Limit, ev bt.Event) error
	// RemoveLimit deletes the named limit (removed false: there was none)
	// and, when it removed one, appends ev in the same transaction.
	RemoveLimit(ctx context.Context, name string, ev bt.Event) (removed bool, err error)
	// ListLimits lists every limit by name.
	ListLimits(ctx context.Context) ([]Limit, error)
	// LimitUses counts, for every limit and each of its values that has
	// running or pending tasks, both, by limit name then value.
	LimitUses(ctx context.Context) ([]LimitUse, error)
}

// LimitCandidate is a claimable task as the limited claim sees it.
type LimitCandidate struct {
	ID    string
	Kind  string
	Attrs map[string]string
}

// Budget names one budget: a limit and a value of its Per attribute.
type Budget struct {
	Limit, Value string
}

// FullBudgets returns the budgets of limits whose running count has
// reached the limit; running counts each limit's running tasks by value.
func FullBudgets(limits []Limit, running map[Budget]int) []Budget {
	var full []Budget
	for b, n := range running {
		for _, l := range limits {
			if l.Name == b.Limit && n >= l.Concurrency {
				full = append(full, b)
			}
		}
	}
	return full
}

// AdmitWithinLimits picks, in the candidates' (claim) order, those whose
// every applicable budget still has room, counting each admitted task
// against its budgets; running is updated in place. A task a budget
// refuses is left pending, untouched: no attempt is charged.
func AdmitWithinLimits(queue string, limits []Limit, running map[Budget]int, cands []LimitCandidate) []string {
	var ids []string
	for _, c := range cands {
		ok := true
		for _, l := range limits {
			if l.Applies(queue, c.Kind) && running[Budget{l.Name, l.Value(c.Attrs)}] >= l.Concurrency {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		for _, l := range limits {
			if l.Applies(queue, c.Kind) {
				running[Budget{l.Name, l.Value(c.Attrs)}]++
			}
		}
		ids = append(ids, c.ID)
	}
	return ids
}
