package pgstore

import (
	"encoding/json"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// scanner is a row of pgx or database/sql.
type scanner interface {
	Scan(dest ...any) error
}

// scanTask reads one row of taskCols. Its destinations are types both pgx
// and database/sql scan into, so enqueue can share it across drivers.
func scanTask(r scanner) (*bt.Task, error) {
	var (
		t                                               bt.Task
		state                                           string
		attributes, retry, inline, spilled              []byte
		runAt, createdAt, updatedAt                     time.Time
		timeoutUS                                       int64
		deadline, attemptedAt, leaseExpiresAt           *time.Time
		cancelRequestedAt, finalizedAt, firstSeen, last *time.Time
		idemKey, mergeKey, traceParent, lastError       *string
		workerID, executionID, deadReason, dlqStatus    *string
		replayedFrom                                    *string
	)
	err := r.Scan(
		&t.ID, &t.Queue, &t.Kind, &state, &t.Priority, &t.Attempt, &t.MaxAttempts,
		&t.PayloadSize, &t.PayloadSpilled, &attributes, &runAt, &createdAt, &updatedAt,
		&timeoutUS, &deadline, &retry, &idemKey, &mergeKey, &t.MergeCount,
		&t.Progress.Total, &t.Progress.Completed, &t.Complexity, &traceParent, &lastError,
		&workerID, &executionID, &attemptedAt, &leaseExpiresAt, &cancelRequestedAt, &finalizedAt,
		&deadReason, &firstSeen, &last, &t.DeadCount, &t.ReplayCount, &dlqStatus, &replayedFrom,
		&inline, &spilled,
	)
	if err != nil {
		return nil, err
	}
	t.State = bt.State(state)
	if t.PayloadSpilled {
		t.Payload = spilled
	} else {
		t.Payload = inline
	}
	if attributes != nil {
		if err := json.Unmarshal(attributes, &t.Attributes); err != nil {
			return nil, fmt.Errorf("task %s: attributes: %w", t.ID, err)
		}
	}
	if retry != nil {
		t.Retry = new(bt.RetryPolicy)
		if err := json.Unmarshal(retry, t.Retry); err != nil {
			return nil, fmt.Errorf("task %s: retry policy: %w", t.ID, err)
		}
	}
	t.RunAt, t.CreatedAt, t.UpdatedAt = utc(runAt), utc(createdAt), utc(updatedAt)
	t.Timeout = bt.Duration(time.Duration(timeoutUS) * time.Microsecond)
	t.Deadline = utcPtr(deadline)
	t.IdempotencyKey = str(idemKey)
	t.MergeKey = str(mergeKey)
	t.TraceParent = str(traceParent)
	t.LastError = str(lastError)
	t.WorkerID = str(workerID)
	t.ExecutionID = str(executionID)
	t.AttemptedAt = utcPtr(attemptedAt)
	t.LeaseExpiresAt = utcPtr(leaseExpiresAt)
	t.CancelRequestedAt = utcPtr(cancelRequestedAt)
	t.FinalizedAt = utcPtr(finalizedAt)
	t.DeadReason = bt.DeadReason(str(deadReason))
	t.FirstSeen = utcPtr(firstSeen)
	t.LastSeen = utcPtr(last)
	t.DLQStatus = bt.DLQStatus(str(dlqStatus))
	t.ReplayedFrom = str(replayedFrom)
	return &t, nil
}

func scanExecution(r scanner) (bt.Execution, error) {
	var (
		e                  bt.Execution
		outcome            string
		finishedAt         *time.Time
		errText, errDetail *string
	)
	if err := r.Scan(&e.ExecutionID, &e.TaskID, &e.Attempt, &e.WorkerID, &e.StartedAt,
		&finishedAt, &outcome, &errText, &errDetail); err != nil {
		return e, err
	}
	e.StartedAt = utc(e.StartedAt)
	e.FinishedAt = utcPtr(finishedAt)
	e.Outcome = bt.Outcome(outcome)
	e.Error = str(errText)
	e.ErrorDetail = str(errDetail)
	return e, nil
}

// utc is how every time leaves the store: UTC, to the microsecond.
func utc(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := utc(*t)
	return &v
}

func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Helpers for parameters: empty and zero values are stored as NULL.

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return *t
}

// nullJSON passes JSON as text: pgx sends it unchanged, and so does every
// database/sql driver (some send []byte as bytea).
func nullJSON(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}
