package store

import (
	"context"
	"time"
)

// LogLine is one line of an execution's log. Seq numbers the lines of one
// execution from 1; the engine assigns them and bounds the log.
type LogLine struct {
	TaskID      string    `json:"-"`
	ExecutionID string    `json:"-"`
	Seq         int       `json:"seq"`
	At          time.Time `json:"at"`
	// Stream: log (the handler's logger), output (a program's stdout and
	// stderr), or truncated (the one marker after the bound).
	Stream string `json:"stream"`
	Line   string `json:"line"`
}

// LogUsage is how much of its bound an execution's log uses.
type LogUsage struct {
	Lines, Bytes, LastSeq int
}

// Logs stores execution logs, written off the settle path in batches.
type Logs interface {
	// AppendLogs inserts lines of any executions; a line whose (execution,
	// seq) exists already is skipped.
	AppendLogs(ctx context.Context, lines []LogLine) error
	// AppendLeasedLogs inserts lines of one execution only while it is
	// the task's current lease (state running): false means nothing was
	// written. With no lines it only checks the lease.
	AppendLeasedLogs(ctx context.Context, taskID, executionID string, lines []LogLine) (bool, error)
	// ExecutionLogUsage reports an execution's log size and last seq.
	ExecutionLogUsage(ctx context.Context, executionID string) (LogUsage, error)
	// ReadLogs returns a task's execution's lines with seq > afterSeq, in
	// order, at most limit.
	ReadLogs(ctx context.Context, taskID, executionID string, afterSeq, limit int) ([]LogLine, error)
}
