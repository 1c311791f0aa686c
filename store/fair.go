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

// FairOneValueFor is how long, on the claims' clock, the claims of a fair
// queue go the plain way after a fair claim found one value waiting: one
// value's fair order is the plain order, and the plain claim neither
// ranks the queue's tasks nor takes the fairness lock. Past it, one claim
// checks (without the lock) that one value still waits and renews it; a
// value that starts waiting meanwhile joins the rotation then, within
// this long.
const FairOneValueFor = time.Second

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

// FairLine is how many claimable tasks (N) a value has at a priority.
type FairLine struct {
	Priority int
	Value    string
	N        int
}

// The fair pick, in virtual time: each waiting value has a pass (its
// claims so far, each 1/weight); a value's k-th next task at a priority
// finishes at pass + k/weight. The highest priority is claimed first, then
// within a priority the earliest finish (ties: the value that sorts first).
// A value without a pass (new, or back from idle: the store forgets the
// passes of values with nothing waiting) starts at the base, the least
// pass of the waiting values, so idling earns no credit.

// FairBase is the base of the waiting values: the least of their passes
// (0 when none has one).
func FairBase(values []string, passes map[string]float64) float64 {
	base := math.Inf(1)
	for _, v := range values {
		if p, ok := passes[v]; ok && p < base {
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

// FairShares is how many tasks of each line a claim of max takes in pick
// order: the claim then reads only those (the next ones of each line).
func FairShares(f FairQueue, lines []FairLine, passes map[string]float64, base float64, max int) map[FairLine]int {
	byPriority := slices.Clone(lines)
	slices.SortFunc(byPriority, func(a, b FairLine) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.Value, b.Value))
	})
	shares := map[FairLine]int{}
	for i := 0; i < len(byPriority) && max > 0; {
		j := i
		for j < len(byPriority) && byPriority[j].Priority == byPriority[i].Priority {
			j++
		}
		level := byPriority[i:j]
		taken := make([]int, len(level))
		for ; max > 0; max-- {
			best, bestFinish := -1, 0.0
			for k, l := range level {
				if taken[k] == l.N {
					continue
				}
				fin := fairStart(l.Value, passes, base) + float64(taken[k]+1)/float64(f.Weight(l.Value))
				if best < 0 || fin < bestFinish {
					best, bestFinish = k, fin
				}
			}
			if best < 0 {
				break
			}
			taken[best]++
		}
		for k, l := range level {
			if taken[k] > 0 {
				shares[FairLine{Priority: l.Priority, Value: l.Value}] = taken[k]
			}
		}
		i = j
	}
	return shares
}

// FairOrder sorts the candidates in pick order.
func FairOrder(f FairQueue, cands []FairCandidate, passes map[string]float64, base float64) []FairCandidate {
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

// FairPasses is the passes to store once picked are claimed: of the
// values picked from, their pass plus 1/weight a task; of the waiting
// values without a pass, the base.
func FairPasses(f FairQueue, values []string, passes map[string]float64, base float64, picked []FairCandidate) map[string]float64 {
	n := map[string]int{}
	for _, c := range picked {
		n[c.Value]++
	}
	next := make(map[string]float64, len(n))
	for _, v := range values {
		if _, ok := passes[v]; !ok {
			next[v] = base
		}
	}
	for v, k := range n {
		next[v] = fairStart(v, passes, base) + float64(k)/float64(f.Weight(v))
	}
	return next
}

// FairStream is what a claim has read of one waiting value's claimable
// tasks: the priority of its next one (Head), the first of them in claim
// order (priority first, then run_at, id; each with its Rank within its
// priority) and whether that is all of them.
type FairStream struct {
	Value string
	Head  int
	Tasks []FairCandidate
	All   bool
}

// FairWants says how many tasks of which values a claim of max must read
// (from the first) before the tasks read hold its picks: none when they
// do. A value's tasks not read yet are counted as if they kept the
// priority of its last one read (or its Head), which places each no later
// in FairOrder than the task it stands for; so when no such task is among
// the first max, the read tasks' first max in FairOrder are the claim's
// picks, whatever the tasks not read are.
func FairWants(f FairQueue, streams []FairStream, passes map[string]float64, base float64, max int) map[string]int {
	type state struct {
		next, unread, rank, priority int
		start, weight                float64
	}
	st := make([]state, len(streams))
	for i, s := range streams {
		st[i] = state{priority: s.Head, start: fairStart(s.Value, passes, base), weight: float64(f.Weight(s.Value))}
		if n := len(s.Tasks); n > 0 {
			st[i].priority, st[i].rank = s.Tasks[n-1].Priority, s.Tasks[n-1].Rank
		}
	}
	// key is the priority and rank of stream i's next task; ok false when
	// it has none.
	key := func(i int) (priority, rank int, ok bool) {
		s := streams[i]
		if st[i].next < len(s.Tasks) {
			c := s.Tasks[st[i].next]
			return c.Priority, c.Rank, true
		}
		if s.All {
			return 0, 0, false
		}
		return st[i].priority, st[i].rank + st[i].unread + 1, true
	}
	for range max {
		best, bestPriority, bestFinish := -1, 0, 0.0
		for i := range streams {
			priority, rank, ok := key(i)
			if !ok {
				continue
			}
			fin := st[i].start + float64(rank)/st[i].weight
			if best < 0 || priority > bestPriority || priority == bestPriority && (fin < bestFinish ||
				fin == bestFinish && streams[i].Value < streams[best].Value) {
				best, bestPriority, bestFinish = i, priority, fin
			}
		}
		if best < 0 {
			break
		}
		if st[best].next < len(streams[best].Tasks) {
			st[best].next++
		} else {
			st[best].unread++
		}
	}
	wants := map[string]int{}
	for i, s := range streams {
		if st[i].unread > 0 {
			wants[s.Value] = len(s.Tasks) + st[i].unread
		}
	}
	return wants
}
