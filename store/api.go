package store

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// QueueCounts is how many tasks a queue holds in each state.
type QueueCounts struct {
	Queue  string
	Counts map[bt.State]int
	// DeadLetters counts the queue's dead tasks by their dead-letter
	// status (the same rows as Counts[StateDead]).
	DeadLetters map[bt.DLQStatus]int
	// OldestPending is the earliest run_at of the queue's pending tasks
	// (nil: none pending).
	OldestPending *time.Time
	// Capped lists the states whose counts are lower bounds, in name
	// order: the store counted them among the newest of their tasks only,
	// and there were more (the same states for every queue; a queue whose
	// tasks were all older may be absent). Empty: every count is exact.
	Capped []bt.State
}

// APIStore holds the reads the HTTP API needs beyond the engine's.
type APIStore interface {
	// CountByQueue counts tasks by queue and state, and dead tasks by
	// dead-letter status, queues in name order: one read, so the counts
	// agree with each other. A store may count a state among its newest
	// tasks only (QueueCounts.Capped); every other count is exact.
	CountByQueue(ctx context.Context) ([]QueueCounts, error)
	// DLQGroups counts the dead letters f selects (its States, AfterID and
	// Limit are ignored: dead tasks only) by reason and by last error, the
	// largest groups first, at most errorLimit errors (MoreErrors: there
	// were more). A where outside the SQL subset is filter.ErrNotInSQL
	// (the client counts such a where in Go over List).
	DLQGroups(ctx context.Context, f ListFilter, errorLimit int) (*DLQGroups, error)
	// Activity counts, per minute in [since, until) (a minute is its Unix
	// minute: seconds/60), the tasks that succeeded, the attempts that
	// failed and the tasks that died: three range reads of partial
	// indexes (finished tasks, failed attempts, dead tasks). Minutes
	// without any are left out.
	Activity(ctx context.Context, since, until time.Time) (map[int64]MinuteActivity, error)
}

// MinuteActivity is one minute of Activity.
type MinuteActivity struct {
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Dead      int `json:"dead"`
}

// GroupCount is one group of a grouped count.
type GroupCount struct {
	Value string `json:"value"`
	Count int    `json:"count"`
}

// DLQGroups is the dead letters of a filter counted by reason and by error.
type DLQGroups struct {
	Total      int          `json:"total"`
	ByReason   []GroupCount `json:"by_reason"`
	ByError    []GroupCount `json:"by_error"`
	MoreErrors bool         `json:"more_errors"`
}

// FlattenQueueCounts turns per-queue counts into one row per queue and
// state, ordered by queue then state, for Stats.
func FlattenQueueCounts(qs []QueueCounts) []QueueStateCount {
	out := []QueueStateCount{}
	for _, q := range qs {
		states := make([]bt.State, 0, len(q.Counts))
		for st := range q.Counts {
			states = append(states, st)
		}
		slices.Sort(states)
		for _, st := range states {
			out = append(out, QueueStateCount{Queue: q.Queue, State: st, Count: int64(q.Counts[st])})
		}
	}
	return out
}

// GroupsKept says whether f filters dead letters by dead-letter status and
// queue only (the states, the cursor, the page's size and order aside):
// the filter whose dead-letter groups the stores keep counted
// (APIStore.DLQGroups reads them instead of the dead letters).
func GroupsKept(f ListFilter) bool {
	f.Queue, f.States, f.DLQStatuses = "", nil, nil
	f.AfterID, f.Limit, f.Newest, f.WithoutPayload = "", 0, false, false
	if len(f.Attrs) == 0 {
		f.Attrs = nil
	}
	return reflect.ValueOf(f).IsZero()
}

// CapGroups cuts groups read with limit+1 to limit, and tells whether
// there were more.
func CapGroups(gs []GroupCount, limit int) ([]GroupCount, bool) {
	if len(gs) > limit {
		return gs[:limit], true
	}
	return gs, false
}

// SortGroups orders groups as DLQGroups answers them: the largest first,
// then by value.
func SortGroups(gs []GroupCount) {
	slices.SortFunc(gs, func(a, b GroupCount) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		return strings.Compare(a.Value, b.Value)
	})
}
