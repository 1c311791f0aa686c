package store

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"
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

// FairOneValueFor is how long, on the claims' clock, the claims of a fair
// queue go the plain way after a fair claim found one value waiting: one
// value's fair order is the plain order, and the plain claim neither
// ranks the queue's tasks nor takes the fairness lock. A value that starts
// waiting meanwhile joins the rotation at the next fair claim, within
// this long.
const FairOneValueFor = time.Second

// Fairness stores which queues are fair; Claim applies it
// (ClaimParams.Fair).
type Fairness interface {
	// SetFair makes the queue fair, or replaces its attribute and weights.
	SetFair(ctx context.Context, f FairQueue) error
	// RemoveFair turns fairness off (removed false: it was not on).
	RemoveFair(ctx context.Context, queue string) (removed bool, err error)
	// ListFair lists the fair queues by name.
	ListFair(ctx context.Context) ([]FairQueue, error)
}

// FairCandidate is a claimable task of a fair queue: its value of the
// queue's attribute and its Rank among the claimable tasks of that value
// and priority (1: the next one, in claim order). Kind and Attrs are read
// when the queue also has limits (the claim admits within them).
type FairCandidate struct {
	ID       string
	Priority int
	Value    string
	Rank     int
	Kind     string
	Attrs    map[string]string
}

// FairPick chooses up to max candidates by FairOrder and returns their ids
// in pick order and the passes to store (FairPasses).
func FairPick(f FairQueue, cands []FairCandidate, passes map[string]float64, max int) ([]string, map[string]float64) {
	if len(cands) == 0 || max <= 0 {
		return nil, nil
	}
	order := FairOrder(f, cands, passes)
	order = order[:min(max, len(order))]
	ids := make([]string, len(order))
	for i, c := range order {
		ids[i] = c.ID
	}
	return ids, FairPasses(f, cands, passes, order)
}

// FairOrder sorts the candidates in pick order: the highest priority
// first, then within a priority by virtual time. Each waiting value has a
// pass (its claims so far, each 1/weight); a value's next task finishes at
// pass + rank/weight, and the earliest finish is claimed first (ties: the
// value that sorts first). A value without a pass (new, or back from idle:
// the store forgets the passes of values with nothing waiting) starts at
// the least pass of the waiting values, so idling earns no credit.
func FairOrder(f FairQueue, cands []FairCandidate, passes map[string]float64) []FairCandidate {
	base := fairBase(cands, passes)
	finish := func(c FairCandidate) float64 {
		return fairStart(c.Value, passes, base) + float64(c.Rank)/float64(f.Weight(c.Value))
	}
	order := slices.Clone(cands)
	slices.SortFunc(order, func(a, b FairCandidate) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(finish(a), finish(b)),
			cmp.Compare(a.Value, b.Value), cmp.Compare(a.Rank, b.Rank))
	})
	return order
}

// FairPasses is the passes to store once picked (some of cands) are
// claimed: of the values picked from, their pass plus 1/weight a task;
// of the candidates' values without a pass, the level start.
func FairPasses(f FairQueue, cands []FairCandidate, passes map[string]float64, picked []FairCandidate) map[string]float64 {
	base := fairBase(cands, passes)
	n := map[string]int{}
	for _, c := range picked {
		n[c.Value]++
	}
	next := make(map[string]float64, len(n))
	for _, c := range cands {
		if _, ok := passes[c.Value]; !ok {
			next[c.Value] = base
		}
	}
	for v, k := range n {
		next[v] = fairStart(v, passes, base) + float64(k)/float64(f.Weight(v))
	}
	return next
}

// fairBase is where a value without a pass starts: the least pass of the
// waiting values (0 when none has one).
func fairBase(cands []FairCandidate, passes map[string]float64) float64 {
	base := math.Inf(1)
	for _, c := range cands {
		if p, ok := passes[c.Value]; ok && p < base {
			base = p
		}
	}
	if math.IsInf(base, 1) {
		return 0
	}
	return base
}

func fairStart(v string, passes map[string]float64, base float64) float64 {
	if p, ok := passes[v]; ok {
		return p
	}
	return base
}
