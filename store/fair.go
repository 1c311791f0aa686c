package store

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// FairQueue makes claims in Queue rotate across the values of the By
// attribute: weighted round robin within a priority (priority first, then
// fairness), so a value with many queued tasks does not hold back one with
// a few. A task without the attribute counts under the empty value.
type FairQueue struct {
	Queue string `json:"queue"`
	By    string `json:"by"`
	// Weights: a value's share of claims against the others' (default 1):
	// a value of weight 3 is claimed three times as often as one of 1.
	Weights   map[string]int `json:"weights,omitempty"`
	CreatedAt time.Time      `json:"created_at"`
}

// Weight is the value's weight (1 unless set).
func (f FairQueue) Weight(value string) int {
	if w := f.Weights[value]; w > 0 {
		return w
	}
	return 1
}

// Fairness stores which queues are fair; Claim applies it
// (ClaimParams.Fair).
type Fairness interface {
	// SetFair makes the queue fair, or replaces its attribute and
	// weights, and appends ev (its audit event; none when ev.Type is
	// empty) in the same transaction.
	SetFair(ctx context.Context, f FairQueue, ev bt.Event) error
	// RemoveFair turns fairness off (removed false: it was not on) and,
	// when it was on, appends ev in the same transaction.
	RemoveFair(ctx context.Context, queue string, ev bt.Event) (removed bool, err error)
	// ListFair lists the fair queues by name.
	ListFair(ctx context.Context) ([]FairQueue, error)
	// FairValues counts the pending tasks of f's queue by their value of
	// f's attribute (a task without it under ""), most first, then by
	// value; at most MaxFairValues of them.
	FairValues(ctx context.Context, f FairQueue) ([]FairValue, error)
}

// FairValue is how many tasks of one value of a fair queue's attribute
// wait (are pending), and the value's weight.
type FairValue struct {
	Value   string `json:"value"`
	Weight  int    `json:"weight"`
	Pending int    `json:"pending"`
}

// MaxFairValues bounds the values FairValues answers: the busiest.
const MaxFairValues = 100

// FairCandidate is a claimable task of a fair queue: its value of the
// queue's attribute and its Rank among the claimable tasks of that value
// and priority (1: the next one, in claim order).
type FairCandidate struct {
	ID       string
	Priority int
	Value    string
	Rank     int
}

// FairPick chooses up to max candidates: the highest priority first, then
// within a priority by virtual time. Each waiting value has a pass (its
// claims so far, each 1/weight); a value's next task finishes at pass +
// rank/weight, and the earliest finish is claimed first. A value without
// a pass (new, or back from idle: the store forgets the passes of values
// with nothing waiting) starts at the least pass of the waiting values, so
// idling earns no credit. It returns the ids in pick order and the passes
// to store: of the values it picked from, and of the new ones.
func FairPick(f FairQueue, cands []FairCandidate, passes map[string]float64, max int) ([]string, map[string]float64) {
	if len(cands) == 0 || max <= 0 {
		return nil, nil
	}
	base := math.Inf(1)
	for _, c := range cands {
		if p, ok := passes[c.Value]; ok && p < base {
			base = p
		}
	}
	if math.IsInf(base, 1) {
		base = 0
	}
	start := func(v string) float64 {
		if p, ok := passes[v]; ok {
			return p
		}
		return base
	}
	finish := func(c FairCandidate) float64 { return start(c.Value) + float64(c.Rank)/float64(f.Weight(c.Value)) }
	order := slices.Clone(cands)
	slices.SortFunc(order, func(a, b FairCandidate) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(finish(a), finish(b)),
			cmp.Compare(a.Value, b.Value), cmp.Compare(a.Rank, b.Rank))
	})
	order = order[:min(max, len(order))]
	ids := make([]string, len(order))
	picked := map[string]int{}
	for i, c := range order {
		ids[i] = c.ID
		picked[c.Value]++
	}
	next := make(map[string]float64, len(picked))
	for _, c := range cands {
		if _, ok := passes[c.Value]; !ok {
			next[c.Value] = base
		}
	}
	for v, n := range picked {
		next[v] = start(v) + float64(n)/float64(f.Weight(v))
	}
	return ids, next
}
