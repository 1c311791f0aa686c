package store

import (
	"context"
	"time"
)

// RelayCheckpoint is where the event-log relay (internal/relay) stands on
// one stream of one named checkpoint: the cursor of the last event its sink
// acknowledged, how many it published and how many of those the broker
// reported as repeats (JetStream's de-duplication), and the last failure.
type RelayCheckpoint struct {
	Name   string `json:"name"`
	Stream string `json:"stream"`
	// Sink is the sink the events go to.
	Sink string `json:"sink"`
	// Cursor is the last acknowledged event's cursor ("": none yet, the
	// beginning of the log).
	Cursor    string    `json:"cursor"`
	UpdatedAt time.Time `json:"updated_at"`
	// Published counts the events the sink acknowledged; Duplicates those
	// of them the broker already held (a repeat after a crash).
	Published  int64 `json:"published"`
	Duplicates int64 `json:"duplicates"`
	// LastError is the last failed publish ("" once one succeeded after
	// it), at LastErrorAt.
	LastError   string     `json:"last_error"`
	LastErrorAt *time.Time `json:"last_error_at"`
}

// RelayCheckpointUpdate moves a checkpoint: Cursor is stored (the events
// up to it were acknowledged), AddPublished and AddDuplicates are added to
// the counts, and Error, when set, becomes the last error (an empty Error
// with Published > 0 clears it).
type RelayCheckpointUpdate struct {
	Name, Stream, Sink, Cursor  string
	AddPublished, AddDuplicates int64
	Error                       string
	Now                         time.Time
	// Create only creates the row when it is missing and changes nothing
	// when it exists (relays starting at once never reset each other).
	Create bool
}

// RelayCheckpoints stores the event-log relay's durable positions, one row
// per (name, stream).
type RelayCheckpoints interface {
	// RelayCheckpoint returns a checkpoint's stream; ErrNotFound when it
	// has none.
	RelayCheckpoint(ctx context.Context, name, stream string) (RelayCheckpoint, error)
	// SaveRelayCheckpoint creates or moves a checkpoint's stream.
	SaveRelayCheckpoint(ctx context.Context, u RelayCheckpointUpdate) error
	// ListRelayCheckpoints lists every checkpoint's streams by name, then
	// stream.
	ListRelayCheckpoints(ctx context.Context) ([]RelayCheckpoint, error)
}
