package backstop

import (
	"context"
	"time"

	"github.com/backstophq/backstop/internal/maintenance"
)

// RetentionResult counts what one retention round deleted.
type RetentionResult struct {
	Succeeded   int `json:"succeeded"`
	Canceled    int `json:"canceled"`
	DeadLetters int `json:"dead_letters"`
	Events      int `json:"events"`
	// OrderingKeys: expired, idle ordering key states (ordering.go).
	OrderingKeys int `json:"ordering_keys"`
	// Runs: workflow runs finished for good, with their step rows.
	Runs int `json:"runs"`
}

// Retain runs one retention round by Config.Retention now, whoever leads
// (internal/maintenance/retention.go): it deletes succeeded and canceled
// tasks finished longer ago than their retention, and closed dead letters
// (discarded, resolved, replayed under a new id) last changed longer ago
// than theirs, each with its executions, payloads and events, in batches of
// 1,000 per transaction; events of the log older than Retention.Events;
// and workflow runs finished for good longer ago than Retention.Runs. The retention leader runs it; it is safe to run
// anywhere (batches lock with SKIP LOCKED on Postgres).
func Retain(ctx context.Context, c *Client) (RetentionResult, error) {
	r, err := maintenance.Retain(ctx, c.store, c.now(), c.retentionPolicy())
	return RetentionResult{Succeeded: r.Succeeded, Canceled: r.Canceled, DeadLetters: r.DeadLetters,
		Events: r.Events, OrderingKeys: r.OrderingKeys, Runs: r.Runs}, err
}

func (c *Client) retentionPolicy() maintenance.RetentionPolicy {
	r := c.cfg.Retention
	return maintenance.RetentionPolicy{Succeeded: r.Succeeded, Canceled: r.Canceled, DeadLetters: c.deadLetterRetention(), Events: r.Events, Runs: r.Runs}
}

// deadLetterRetention is Retention.DeadLetters raised to the purge floor:
// retention never deletes a closed dead letter younger than the floor
// (negative, forever, stays forever).
func (c *Client) deadLetterRetention() time.Duration {
	d := c.cfg.Retention.DeadLetters
	if d >= 0 && d < c.cfg.PurgeFloor {
		return c.cfg.PurgeFloor
	}
	return d
}
