package store

import (
	"context"
	"time"
)

// IngestPosition is where an ingester (internal/ingest) stands on one
// topic (Kafka) or subject (NATS) for one consumer group, as it last
// reported: the messages behind, and since when it is behind in the
// broker's time, so that a reader dates the lag at its own now (a lag
// that grows while the ingester is stuck or gone).
type IngestPosition struct {
	Group string `json:"group"`
	Topic string `json:"topic"`
	Queue string `json:"queue"`
	// Holder is the ingester that reported (its election candidate id).
	Holder string `json:"holder"`
	// LagMessages: the messages in the broker not yet ingested.
	LagMessages int64 `json:"lag_messages"`
	// LagFrom is the broker timestamp the lag in time is measured from
	// (the oldest message read and not committed, else the newest
	// committed while messages wait); nil when caught up.
	LagFrom   *time.Time `json:"lag_from"`
	UpdatedAt time.Time  `json:"updated_at"`
	// LastError is the last failure to enqueue ("" once a batch committed
	// after it), at LastErrorAt.
	LastError   string     `json:"last_error"`
	LastErrorAt *time.Time `json:"last_error_at"`
}

// IngestPositions stores the ingesters' reports, one row per (group,
// topic): the newest report replaces the row.
type IngestPositions interface {
	// SaveIngestPosition replaces the row of p's group and topic.
	SaveIngestPosition(ctx context.Context, p IngestPosition) error
	// ListIngestPositions lists every row by group, then topic.
	ListIngestPositions(ctx context.Context) ([]IngestPosition, error)
}
