package store

import (
	"context"
	"errors"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// Ops is what maintenance beyond the hot path needs from a store: leader
// election among processes, retention, statistics and the operator views.
type Ops interface {
	// TryLead takes the lease named name for id when it is free or expired,
	// or renews it when id holds it, until now+ttl. It reports whether id
	// holds it afterwards. Many processes (on many hosts) may call it at
	// once: at most one wins.
	TryLead(ctx context.Context, name, id string, now time.Time, ttl time.Duration) (bool, error)
	// ResignLead gives the lease up if id holds it, so another process can
	// take it at once instead of after the TTL.
	ResignLead(ctx context.Context, name, id string) error
	// Leader reads the lease; ErrNotFound when nobody ever held it or it
	// was resigned.
	Leader(ctx context.Context, name string) (*Leader, error)

	// DeleteFinished deletes up to limit tasks in state (succeeded or
	// canceled) finalized before before, with their executions, spilled
	// payloads and events, in one transaction. (Closed dead letters are
	// deleted by DLQ.PurgeDLQ.) It returns how many tasks
	// it deleted; callers repeat until fewer than limit.
	DeleteFinished(ctx context.Context, state bt.State, before time.Time, limit int) (int, error)

	// Stats counts rows and measures tables.
	Stats(ctx context.Context) (*Stats, error)
	// View lists the tasks of one operator view (see View), at most limit.
	View(ctx context.Context, v View, now time.Time, limit int) ([]*bt.Task, error)

	// ProbeWrite checks that the store can write now, cheaply and leaving
	// nothing behind: a row larger than a page (it needs new pages, as an
	// enqueue would) written in a transaction that is rolled back; on
	// SQLite also the free space of the database's file system (at least
	// MinFreeBytes), since a rolled-back write never reaches the disk. Its
	// error is classified (Classify): a busy database, a full disk or a
	// lost connection is ErrUnavailable.
	ProbeWrite(ctx context.Context) error
}

// MinFreeBytes: with less free space than this on an embedded database's
// file system, ProbeWrite reports the disk full.
const MinFreeBytes = 1 << 20

// ProbeRow is the name of the row ProbeWrite writes and rolls back.
const ProbeRow = "backstop.write-probe"

// ErrPermissionDenied: the database role may not do this (least-privilege
// roles, docs/postgres-roles.md). Drivers wrap it.
var ErrPermissionDenied = errors.New("permission denied")

// Leader is a held (or expired) leadership lease.
type Leader struct {
	Name      string    `json:"name"`
	LeaderID  string    `json:"leader_id"`
	ElectedAt time.Time `json:"elected_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

// View names an operator view over tasks (seed 002). On Postgres each is
// also a SQL view (backstop_pending_retries, …) for DBAs.
type View string

const (
	// ViewPendingRetries: scheduled tasks that already failed at least
	// once (attempt > 0), soonest run_at first.
	ViewPendingRetries View = "pending-retries"
	// ViewRetryExhausted: dead letters with reason attempts_exhausted,
	// most recently dead first.
	ViewRetryExhausted View = "retry-exhausted"
	// ViewRecentFailures: tasks with a failed attempt (transient_error,
	// permanent_error, timeout, lease_expired) finished in the 24 hours
	// before now, most recent failure first.
	ViewRecentFailures View = "recent-failures"
)

// Views lists every view.
var Views = []View{ViewPendingRetries, ViewRetryExhausted, ViewRecentFailures}

// RecentFailuresWindow is how far back ViewRecentFailures looks.
const RecentFailuresWindow = 24 * time.Hour

// Stats is a snapshot of a store's contents and size.
type Stats struct {
	Driver string `json:"driver"`
	// Tasks counts rows per queue and state.
	Tasks []QueueStateCount `json:"tasks"`
	// DeadLetters counts rows in state dead by dlq_status and reason.
	DeadLetters []DeadLetterCount `json:"dead_letters"`
	// OldestPendingRunAt is the earliest run_at of a pending task (nil:
	// none): how long the oldest claimable task has waited.
	OldestPendingRunAt *time.Time `json:"oldest_pending_run_at"`
	// OldestRunningSince is the earliest attempted_at of a running task.
	OldestRunningSince *time.Time `json:"oldest_running_since"`
	// Tables are the sizes of Backstop's tables; Bytes is -1 when the
	// driver cannot measure one table alone.
	Tables []TableSize `json:"tables"`
	// DatabaseBytes is the whole database file (SQLite) or the sum of the
	// tables (Postgres).
	DatabaseBytes int64 `json:"database_bytes"`
	// Leaders are the leadership leases.
	Leaders []Leader `json:"leaders"`
}

// QueueStateCount is one row count.
type QueueStateCount struct {
	Queue string   `json:"queue"`
	State bt.State `json:"state"`
	Count int64    `json:"count"`
}

// DeadLetterCount is one row count of dead letters.
type DeadLetterCount struct {
	Status bt.DLQStatus  `json:"status"`
	Reason bt.DeadReason `json:"reason"`
	Count  int64         `json:"count"`
}

// TableSize is the size of one table with its indexes.
type TableSize struct {
	Table string `json:"table"`
	Bytes int64  `json:"bytes"`
}
