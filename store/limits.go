package store

import (
	"context"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// Limit is a cluster-wide limit, declared on a queue and optionally
// narrowed to one kind; with Per, each value of that attribute has its own
// budget (a task without the attribute counts under the empty value). It
// is one of two kinds (Type):
//
//   - a concurrency limit (Concurrency > 0): at most Concurrency tasks of
//     its scope (of one value, with Per) are running at once across every
//     process claiming from the database; Claim admits a task only while
//     its budget's running rows are fewer;
//   - a rate limit (Rate > 0): at most Rate tasks of its scope start per
//     second, with bursts of up to Burst: each budget is a token bucket of
//     Burst tokens refilled at Rate a second (a row of its own, read and
//     written in the claim's transaction at the claim's time); Claim
//     admits a task only while its budget holds a whole token, and takes it.
type Limit struct {
	Name        string    `json:"name"`
	Queue       string    `json:"queue"`
	Kind        string    `json:"kind,omitempty"` // empty: every kind of the queue
	Per         string    `json:"per,omitempty"`  // empty: one budget for the scope
	Concurrency int       `json:"concurrency"`    // 0 for a rate limit
	Rate        float64   `json:"rate,omitempty"` // starts per second; 0 for a concurrency limit
	Burst       int       `json:"burst,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
}

// Limit types (Limit.Type).
const (
	LimitConcurrency = "concurrency"
	LimitRate        = "rate"
)

// Type is the kind of limit: LimitRate or LimitConcurrency.
func (l Limit) Type() string {
	if l.Rate > 0 {
		return LimitRate
	}
	return LimitConcurrency
}

// Bucket is a rate limit budget's token bucket as last stored: Tokens left
// at At. A budget without a stored bucket has a full one.
type Bucket struct {
	Tokens float64
	At     time.Time
}

// tokenSlack absorbs float rounding in refills (20 ms at 50/s must make
// one whole token).
const tokenSlack = 1e-9

// WholeToken reports whether a bucket holding tokens can start a task (the
// claim and the "why it waits" reads decide alike).
func WholeToken(tokens float64) bool { return tokens >= 1-tokenSlack }

// Tokens is how many tokens a bucket holds at now: refilled at Rate a
// second since it was stored, at most Burst (a clock that went back
// refills nothing). stored false: a full bucket.
func (l Limit) Tokens(b Bucket, stored bool, now time.Time) float64 {
	if !stored {
		return float64(l.Burst)
	}
	elapsed := max(now.Sub(b.At).Seconds(), 0)
	return min(float64(l.Burst), b.Tokens+elapsed*l.Rate)
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
// this budget, which is full (Pending when it admits no task now, else 0):
// a concurrency budget whose Running has reached the limit, a rate budget
// with less than a whole token. Tokens (rate limits only) is how many its
// bucket holds now.
type LimitUse struct {
	Limit   string   `json:"limit"`
	Value   string   `json:"value"`
	Running int      `json:"running"`
	Pending int      `json:"pending"`
	Waiting int      `json:"waiting"`
	Tokens  *float64 `json:"tokens,omitempty"`
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
	// running or pending tasks, both, by limit name then value; a rate
	// budget's tokens are those its bucket holds at now.
	LimitUses(ctx context.Context, now time.Time) ([]LimitUse, error)
	// NextToken is when the first of queue's rate budgets that held less
	// than a whole token at at (the time a claim that came back short
	// began) gets one (zero: none was short), so a worker whose claim a
	// rate limit cut short waits until then instead of a poll interval.
	// The answer may be in the past: a budget the claim found short is
	// still named after its token came (a worker slow to ask must claim
	// again, not wait for its poll). A bucket stored after at (by that
	// claim or a later one) is read at its own time.
	NextToken(ctx context.Context, queue string, at time.Time) (time.Time, error)
}

// TokenDue is when a bucket holding tokens at now, refilled at rate a
// second, holds a whole token (now when it already does).
func TokenDue(tokens, rate float64, now time.Time) time.Time {
	if WholeToken(tokens) || rate <= 0 {
		return now
	}
	return now.Add(time.Duration((1 - tokens) / rate * float64(time.Second)))
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

// Budgets is what a limited claim knows of its queue's budgets, read in
// its transaction under the limits' lock, and what it takes of them.
type Budgets struct {
	// Now is the claim's time (the engine's clock).
	Now time.Time
	// Running counts the running tasks of each concurrency budget
	// (absent: none).
	Running map[Budget]int
	// Buckets are the stored token buckets of rate budgets (absent: full).
	Buckets map[Budget]Bucket
	// Taken counts the tokens this claim took of each rate budget; the
	// claim stores those buckets (Spent) before it commits.
	Taken map[Budget]int
}

// NewBudgets returns empty budgets at now.
func NewBudgets(now time.Time) *Budgets {
	return &Budgets{Now: now, Running: map[Budget]int{}, Buckets: map[Budget]Bucket{}, Taken: map[Budget]int{}}
}

// tokens is how many whole-or-partial tokens budget b of rate limit l has
// left for this claim.
func (bs *Budgets) tokens(l Limit, b Budget) float64 {
	st, ok := bs.Buckets[b]
	return l.Tokens(st, ok, bs.Now) - float64(bs.Taken[b])
}

// room reports whether budget b of l admits one more task.
func (bs *Budgets) room(l Limit, b Budget) bool {
	if l.Rate > 0 {
		return WholeToken(bs.tokens(l, b))
	}
	return bs.Running[b] < l.Concurrency
}

// take counts one admitted task against budget b of l.
func (bs *Budgets) take(l Limit, b Budget) {
	if l.Rate > 0 {
		bs.Taken[b]++
	} else {
		bs.Running[b]++
	}
}

// Full returns the budgets that admit no task now: a concurrency budget
// whose running count has reached its limit, a rate budget with less than
// a whole token (only stored buckets can be short: absent ones are full).
func (bs *Budgets) Full(limits []Limit) []Budget {
	var full []Budget
	for _, l := range limits {
		if l.Rate > 0 {
			for b := range bs.Buckets {
				if b.Limit == l.Name && !bs.room(l, b) {
					full = append(full, b)
				}
			}
			continue
		}
		for b, n := range bs.Running {
			if b.Limit == l.Name && n >= l.Concurrency {
				full = append(full, b)
			}
		}
	}
	return full
}

// Overrun checks tasks an optimistic claim took as a queue without limits
// would (Running already counts them: they are running rows) against the
// budgets: true when one is over — a concurrency budget running more than
// its limit, a rate budget without a token for each of its tasks.
// Otherwise their tokens are taken.
func (bs *Budgets) Overrun(queue string, limits []Limit, tasks []*bt.Task) bool {
	for _, t := range tasks {
		for _, l := range limits {
			if !l.Applies(queue, t.Kind) {
				continue
			}
			b := Budget{l.Name, l.Value(t.Attributes)}
			if l.Rate == 0 {
				if bs.Running[b] > l.Concurrency {
					return true
				}
				continue
			}
			if !bs.room(l, b) {
				return true
			}
			bs.take(l, b)
		}
	}
	return false
}

// Spent is the buckets this claim took tokens of, as they must be stored:
// the tokens left and the claim's time (never earlier than the stored
// one: a process whose clock lags refills nothing twice).
func (bs *Budgets) Spent(limits []Limit) map[Budget]Bucket {
	out := map[Budget]Bucket{}
	for _, l := range limits {
		for b, n := range bs.Taken {
			if b.Limit != l.Name || n == 0 {
				continue
			}
			st, ok := bs.Buckets[b]
			at := bs.Now
			if ok && st.At.After(at) {
				at = st.At
			}
			out[b] = Bucket{Tokens: max(l.Tokens(st, ok, bs.Now)-float64(n), 0), At: at}
		}
	}
	return out
}

// AdmitWithinLimits picks, in the candidates' (claim) order, those whose
// every applicable budget still has room, counting each admitted task
// against its budgets (a running slot, a token). A task a budget refuses
// is left pending, untouched: no attempt is charged.
func AdmitWithinLimits(queue string, limits []Limit, bs *Budgets, cands []LimitCandidate) []string {
	var ids []string
	for _, c := range cands {
		ok := true
		for _, l := range limits {
			if l.Applies(queue, c.Kind) && !bs.room(l, Budget{l.Name, l.Value(c.Attrs)}) {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		for _, l := range limits {
			if l.Applies(queue, c.Kind) {
				bs.take(l, Budget{l.Name, l.Value(c.Attrs)})
			}
		}
		ids = append(ids, c.ID)
	}
	return ids
}
