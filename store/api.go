package store

import (
	"context"
	"slices"

	bt "github.com/backstophq/backstop/backstoptype"
)

// QueueCounts is how many tasks a queue holds in each state.
type QueueCounts struct {
	Queue  string
	Counts map[bt.State]int
}

// APIStore holds the reads the HTTP API needs beyond the engine's.
type APIStore interface {
	// CountByQueue counts tasks by queue and state, queues in name order.
	CountByQueue(ctx context.Context) ([]QueueCounts, error)
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
