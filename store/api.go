package store

import (
	"context"

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
