package backstoptype

import (
	"encoding/json"
	"time"
)

// Event is one entry of a task's history, in DESIGN.md's envelope: a global
// sequence, a time, a type ("dlq.replayed", …), the subject task with its
// queue and kind, who did it, and a type-specific JSON body.
type Event struct {
	ID  string `json:"id"`
	Seq int64  `json:"seq"`
	// Cursor is the event's position in the log, what a reader passes as
	// "after" to continue behind it (docs/events.md).
	Cursor     string            `json:"cursor,omitempty"`
	Time       time.Time         `json:"time"`
	Type       string            `json:"type"`
	Subject    string            `json:"subject"`
	Queue      string            `json:"queue"`
	Kind       string            `json:"kind"`
	Attributes map[string]string `json:"attributes,omitempty"`
	Actor      string            `json:"actor"`
	Body       json.RawMessage   `json:"body"`
}
