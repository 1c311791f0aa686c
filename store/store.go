// Package store is the seam between Backstop's engine and its databases.
//
// A driver (sqlitestore, pgstore) implements Store with plain, atomic
// operations: it never decides policy (retry delays, dead-letter reasons,
// validation); the engine decides and the store applies, each call in one
// transaction (or, through InTx, several writes in one: tx.go). Every driver
// must pass the conformance suite in storetest.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// Sentinel errors every driver returns (wrapped) so callers can use errors.Is.
var (
	ErrNotFound = errors.New("not found")
	// ErrConflict: a task with that id already exists, or the operation does
	// not fit the task's current state.
	ErrConflict = errors.New("conflict")
)

// Features are a driver's honest differences, declared: the engine and
// the conformance suite read them instead of asserting on driver types or
// names.
type Features struct {
	// ConcurrentWriters: write transactions run side by side (Postgres);
	// false: one writer at a time, a second waits for the first's commit
	// (SQLite).
	ConcurrentWriters bool
	// SettleParallelism is how many settle batches a worker applies well
	// at once: Postgres 2 (statements on disjoint tasks run side by side,
	// so a finished attempt waits for about one batch, not a full queue;
	// the worker's second completer fills its batch while the first's is
	// written and writes it after, unless that write is slow), SQLite 1
	// (one writer; its batches are as big as the backlog).
	SettleParallelism int
	// ClaimParallelism is how many claims of one queue a worker runs at
	// once when many of its slots are free: Postgres 2 (SKIP LOCKED claims
	// pass each other's rows; two claim statements on two connections
	// instead of one after the other); SQLite 0 or 1, one (one writer).
	ClaimParallelism int
}

// Warmer is a store that can ready its connections before a worker's
// first claim (pgstore: opens up to n of its pool's connections and runs
// on each a claim of queue that takes nothing, so that no task waits for
// a connection's start or its first plans). A worker calls it at Start,
// bounded in time; an error only means the connections were not warmed.
type Warmer interface {
	Warm(ctx context.Context, queue string, n int) error
}

// Store is what the engine needs from a database.
type Store interface {
	// Driver is "sqlite" or "postgres".
	Driver() string
	// Features declares how the driver differs.
	Features() Features
	Migrate(ctx context.Context) error
	MigrationStatus(ctx context.Context) ([]Migration, error)
	// CheckSchema refuses (*SchemaTooNewError) a database whose schema
	// version is ahead of this binary's migrations; a new, empty database
	// passes.
	CheckSchema(ctx context.Context) error
	Close() error

	// Enqueue inserts prepared tasks in one transaction, all or nothing.
	Enqueue(ctx context.Context, tasks []*bt.Task, opts EnqueueOpts) ([]EnqueueResult, error)
	// EnqueueTx does the same inside the caller's transaction (a *sql.Tx,
	// or for Postgres also a pgx.Tx); the caller commits.
	EnqueueTx(ctx context.Context, tx any, tasks []*bt.Task, opts EnqueueOpts) ([]EnqueueResult, error)

	// Claim leases up to Max pending tasks of the queue whose run_at has come,
	// highest priority first, then oldest run_at. Each gets a new
	// execution_id, attempt+1, and lease_expires_at = Now+Lease.
	Claim(ctx context.Context, p ClaimParams) ([]*bt.Task, error)
	// Heartbeat extends the leases still held and stores reported progress;
	// the task.progress events it writes name ctx's actor (WithActor; none:
	// empty).
	// A batch (more than one beat) may skip a task another transaction is
	// changing at that moment (its settlement in flight): reported held if
	// the lease is still the beat's, not extended this time.
	Heartbeat(ctx context.Context, beats []Beat, now, leaseUntil time.Time) ([]BeatResult, error)
	// Settle applies the engine's decision about attempts (or, with an empty
	// ExecutionID, about tasks that are not running). A settlement applies
	// only if the lease it names is still current; the result says which
	// did. A cancel request wins over going back to wait: a task whose
	// cancel was requested becomes canceled instead of scheduled/pending.
	// The events it writes name ctx's actor (WithActor; none: empty, an
	// in-process worker's).
	Settle(ctx context.Context, s []Settlement) ([]bool, error)
	// InTx runs fn in one transaction whose Tx settles, enqueues and
	// appends events (store/tx.go): all of it commits when fn returns nil,
	// none of it when fn returns an error, panics or an operation failed.
	// Inside fn use only the Tx: on SQLite the transaction holds the
	// process's one writer connection, so another write would wait for it.
	InTx(ctx context.Context, fn func(Tx) error) error
	// WritePlan is Tx.WritePlan in a transaction of its own (a workflow
	// run's start). Postgres sends a plan without run updates as one
	// pipeline (BEGIN, the writes, COMMIT, the wake-up after it): one
	// round trip.
	WritePlan(ctx context.Context, w PlanWrite) ([]EnqueueResult, error)
	// RequestCancel cancels a scheduled/pending/buffered task at once and
	// marks a running one for cooperative cancellation (the worker sees it
	// on its next heartbeat). Terminal tasks: ErrConflict; unknown:
	// ErrNotFound.
	RequestCancel(ctx context.Context, id string, now time.Time) (*bt.Task, error)

	Get(ctx context.Context, id string) (*bt.Task, error)
	// TaskDebounce reads a debounced task's debounce (nil for a task that
	// is not debounced; ErrNotFound for an unknown task).
	TaskDebounce(ctx context.Context, id string) (*bt.TaskDebounce, error)
	List(ctx context.Context, f ListFilter) ([]*bt.Task, error)
	// Executions lists a task's attempts in order; an unknown task has none.
	Executions(ctx context.Context, taskID string) ([]bt.Execution, error)

	// Maintenance reads and sweeps.
	ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]*bt.Task, error)
	PastDeadline(ctx context.Context, now time.Time, limit int) ([]*bt.Task, error)
	PromoteScheduled(ctx context.Context, now time.Time, limit int) (int, error)

	// Dead-letter operations (store/dlq.go) and operations/maintenance
	// beyond the hot path (store/ops.go).
	DLQ
	Ops
	// Operator actions on live tasks, in bulk (store/taskactions.go).
	TaskActions

	// API tokens (store/tokens.go) and the reads only the HTTP API needs
	// (store/api.go).
	Tokens
	APIStore
	Queues   // paused queues (store/queues.go)
	Limits   // cluster-wide concurrency limits (store/limits.go)
	Fairness // fair queues (store/fair.go)
	Workers  // the worker registry (store/workers.go)
	Logs     // execution logs (store/logs.go)
	EventLog // reading the event log by stream and cursor (store/events.go)
	Ordering // ordered processing (store/ordering.go)
	Secrets  // keys shared by every process (store/secrets.go)
	// Workflows: definitions, runs and their steps (store/workflows.go);
	// their transactional writes are the Tx's (WorkflowTx).
	Workflows
	Schedules // periodic tasks (store/schedules.go)
	// ActivityRollup: the history of finished work by bucket, queue and
	// kind (store/activity.go).
	ActivityRollup
	// RelayCheckpoints: the event-log relay's positions (store/relaycheckpoints.go).
	RelayCheckpoints
	// IngestPositions: the ingesters' reports (store/ingestpositions.go).
	IngestPositions
	// CountKeeper: the kept counts of tasks by queue and state
	// (store/counts.go).
	CountKeeper

	// Wakeups delivers queue names that got new claimable work, until ctx
	// ends. Delivery is best effort (coalesced, may drop when full); workers
	// still poll as a fallback. An empty name means "any queue may have
	// work" (sent after a listener reconnects, when notifications may have
	// been missed).
	Wakeups(ctx context.Context) <-chan string
}

// Migration is one schema version and whether it is applied.
type Migration struct {
	Version   int64      `json:"version"`
	Name      string     `json:"name"`
	AppliedAt *time.Time `json:"applied_at"`
}

// MergeFunc combines a waiting task's payload with a new one.
// mergeCount is how many merges the existing payload already absorbed.
type MergeFunc func(kind string, existing json.RawMessage, mergeCount int, incoming json.RawMessage) (json.RawMessage, error)

// EnqueueOpts carries engine decisions the driver applies while inserting.
type EnqueueOpts struct {
	// InlineLimit: payloads larger than this many bytes spill to side storage.
	InlineLimit int
	// Merge resolves a merge_key collision; required when any task has one.
	Merge MergeFunc
	// Events the engine adds about these tasks (e.g. task.too_complex),
	// written in the same transaction after their task.enqueued events.
	Events []bt.Event
	// Debounce, by task index (empty: no task is debounced).
	Debounce []Debounce
}

// Debounce says how one task of an enqueue merges when it is debounced.
type Debounce struct {
	// Debounced: merging into the waiting task of its merge key also moves
	// that task's run time to the incoming task's (its state follows:
	// scheduled, or pending once due), and the merge's task.enqueued event
	// says "debounced": true.
	Debounced bool
	// MaxWait caps the moved run time at the waiting task's creation plus
	// MaxWait; 0: no cap.
	MaxWait time.Duration
	// For is the quiet period, stored with the task (and its max-wait
	// deadline) for its page: bt.TaskDebounce.
	For time.Duration
}

// Until is the max-wait deadline of a debounced task created at created:
// created + MaxWait (nil without a MaxWait).
func (d Debounce) Until(created time.Time) *time.Time {
	if d.MaxWait <= 0 {
		return nil
	}
	at := created.Add(d.MaxWait)
	return &at
}

// DebouncedRunAt is the run time a debounced merge gives the waiting task.
func (d Debounce) DebouncedRunAt(existing, incoming *bt.Task) time.Time {
	at := incoming.RunAt
	if d.MaxWait > 0 {
		if limit := existing.CreatedAt.Add(d.MaxWait); limit.Before(at) {
			at = limit
		}
	}
	return at
}

// DebounceOf is the debounce of task i (none when opts has no entry for it).
func (o EnqueueOpts) DebounceOf(i int) Debounce {
	if i < len(o.Debounce) {
		return o.Debounce[i]
	}
	return Debounce{}
}

// EnqueueResult reports what happened to one task of an enqueue.
type EnqueueResult struct {
	Task *bt.Task
	// Merged: the task was merged into a waiting task with the same merge_key.
	Merged bool
	// Duplicate: a live task with the same idempotency_key already existed
	// and is returned instead.
	Duplicate bool
}

// ClaimParams selects and leases tasks.
type ClaimParams struct {
	Queue    string
	Kinds    []string // empty: any kind
	WorkerID string
	Max      int
	Now      time.Time
	Lease    time.Duration
	// Limited: the queue may have limits (store/limits.go). The store then
	// reads the queue's limits in the claim's transaction, serialized with
	// every other limited claim of the queue (on Postgres, a row lock on
	// each limit), and claims only what their budgets leave room for.
	// False: the plain claim, which never reads the limits.
	Limited bool
	// Fair: the queue may be fair (store/fair.go). The store then reads
	// its fairness in the claim's transaction, serialized with the queue's
	// other fair claims, and claims by FairShares and FairOrder — within
	// the queue's limits with Limited. While one value alone waits
	// (FairOneValueFor) it claims as without Fair.
	Fair bool
}

// Beat is one running attempt's heartbeat.
type Beat struct {
	TaskID      string
	ExecutionID string
	Progress    *bt.Progress // nil: unchanged
}

// BeatResult tells the worker what happened to one lease.
type BeatResult struct {
	TaskID string
	// Lost: the lease is no longer this execution's (expired and settled,
	// or the task was replayed); the worker must stop.
	Lost bool
	// CancelRequested: an operator canceled the task.
	CancelRequested bool
}

// Settlement is the engine's decision about one task.
type Settlement struct {
	TaskID string
	// ExecutionID names the attempt being settled; the settlement applies
	// only while the task is running under it. Empty: the task must be
	// scheduled or pending (deadline sweeps), and no execution is recorded.
	ExecutionID string
	Outcome     bt.Outcome
	Error       string
	ErrorDetail string
	FinishedAt  time.Time

	// Next state: succeeded, scheduled/pending (with RunAt), dead (with
	// DeadReason) or canceled.
	State      bt.State
	RunAt      time.Time
	DeadReason bt.DeadReason
	// Uncharged: the attempt does not count (snoozed, released): attempt is
	// decremented back.
	Uncharged bool
	Progress  *bt.Progress
	// Result is a succeeded attempt's JSON result (a workflow step's:
	// store/workflows.go). Drivers do not write it: the engine records it
	// on the step in the same transaction.
	Result json.RawMessage
	// TraceParent is the settled task's W3C traceparent (not written): a
	// workflow step's successors are traced as it was (sampled or not).
	TraceParent string
	// Queue is the settled task's queue when the engine knows it (not
	// written): only a batch that ends a task of an ordered queue (or of
	// an unknown one) is settled with its keys' admission.
	Queue string
}

// ListFilter selects tasks. Results are ordered by id (UUIDv7: by creation).
type ListFilter struct {
	Queue   string
	Kind    string
	States  []bt.State
	Reason  bt.DeadReason
	Attrs   map[string]string
	AfterID string // cursor: ids after this one in the listing's order
	Limit   int    // default 100

	// Newest lists by id descending (the newest first: ids are UUIDv7 by
	// default) instead of ascending; AfterID then selects smaller ids.
	Newest bool

	// WithoutPayload lists summaries: each task's Payload is left nil
	// (PayloadSize still gives its length in bytes) and no payload, inline
	// or spilled, is read from the database.
	WithoutPayload bool

	// Dead-letter filters (additive; zero values select everything).
	DLQStatuses   []bt.DLQStatus // dlq_status is one of these
	ErrorContains string         // last_error contains this text (any task)
	Since, Until  time.Time      // last_seen within [Since, Until]

	// Task filters (additive; zero values select everything).
	IdempotencyKey             string    // enqueued with this idempotency key
	CreatedSince, CreatedUntil time.Time // created_at within [CreatedSince, CreatedUntil]

	// Where is a CEL condition on the payload and attributes
	// (internal/filter; docs/api.md "Filtering by payload"): a well-defined
	// subset is evaluated in SQL, the rest in Go over a scan of the other
	// conditions' tasks (List here: the stores' counts and bulk operations
	// take the SQL subset, and the client streams the rest through List and
	// Go: DeadLetterGroupCounts, Redrive).
	Where string
}

// CursorOp is the comparison a list's cursor makes on ids: past AfterID
// in ListFilter.Newest's order.
func CursorOp(newest bool) string {
	if newest {
		return "<"
	}
	return ">"
}

// OrderDir is the SQL direction of a list's ids in ListFilter.Newest's
// order.
func OrderDir(newest bool) string {
	if newest {
		return "DESC"
	}
	return "ASC"
}
