package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// Ordered processing (docs/ordering.md). A task of an ordering queue that
// carries an ordering key is enqueued in state buffered with a row in the
// driver's ordering table (status held). Order — called by the engine
// before it claims from the queue, and by maintenance for due drains —
// examines every key of the queue with work, in one transaction, and
// applies the engine's policy (OrderingSettings.Decide): stale tasks are canceled, gaps buffered, drains stepped,
// and at most one task per key is admitted (made pending) at a time.
// SettleOrdered applies the same policy to the keys whose busy task a
// settle batch ended, in the settle's transaction, so a busy key's next
// turn costs no scan of the queue. Both lock the key state rows they
// judge, so a key is judged by one transaction at a time.

// EndsTask reports whether a settlement ends its task (a key's busy task
// so frees its key): succeeded, dead or canceled.
func EndsTask(s Settlement) bool {
	return s.State == bt.StateSucceeded || s.State == bt.StateDead || s.State == bt.StateCanceled
}

// EndedTasks are the ids of the tasks ss ended (EndsTask) among the
// settlements that applied (oks, as Settle answers).
func EndedTasks(ss []Settlement, oks []bool) []string {
	var ended []string
	for i, st := range ss {
		if oks[i] && EndsTask(st) {
			ended = append(ended, st.TaskID)
		}
	}
	return ended
}

// Ordering is what a driver offers for ordered processing.
type Ordering interface {
	// Order runs admission and due drains for one queue.
	Order(ctx context.Context, queue string, set OrderingSettings, now time.Time) (OrderingDelta, error)
	// SettleOrdered is Settle, and in the same transaction the admission
	// of the keys whose busy task the batch ended (a settlement that
	// applied with state succeeded, dead or canceled): each such key is
	// judged by set(queue) as Order would (settings with ok false: the
	// key is left to Order), so its next task is pending when the batch
	// commits. Order remains the sweep for new tasks, drains and keys
	// whose task ended another way. It returns what Settle returns and
	// the ordering deltas by queue.
	SettleOrdered(ctx context.Context, s []Settlement, set func(queue string) (OrderingSettings, bool), now time.Time) ([]bool, map[string]OrderingDelta, error)
	// OrderingInfo returns the ordering key, sequence and gaps of tasks (by
	// id); tasks without ordering are absent.
	OrderingInfo(ctx context.Context, ids []string) (map[string]OrderingInfo, error)
	// OrderingFallback makes every held/buffered task of the queue pending
	// and forgets its ordering (graceful degradation when Order fails); it
	// returns how many tasks it released.
	OrderingFallback(ctx context.Context, queue string, now time.Time) (int, error)
	// DeleteIdleOrderingKeys deletes up to limit key states that expired
	// before now and are idle (no task running, no drain): the state
	// admission would forget anyway (retention; a deleted task's ordering
	// row goes with the task).
	DeleteIdleOrderingKeys(ctx context.Context, now time.Time, limit int) (int, error)
	// OrderingKeys lists a queue's ordering keys — those with a state and
	// those with tasks waiting — in key order, the keys after after, at most
	// limit (1..MaxOrderingKeys). An unknown queue has none.
	OrderingKeys(ctx context.Context, queue, after string, limit int) ([]OrderingKeyInfo, error)
	// OrderedQueues lists, by name, the queues for which OrderingKeys
	// answers at least one key: those holding a key's state or a task
	// waiting by its key. One index probe per such queue, whatever the
	// number of tasks and keys.
	OrderedQueues(ctx context.Context) ([]string, error)
}

// MaxOrderingKeys is the most keys one OrderingKeys call returns.
const MaxOrderingKeys = 1000

// OrderingKeyInfo is what an operator sees of one ordering key: its state
// as admission left it (a busy task that ended counts as handled, as the
// next admission will count it) and its waiting tasks by ordering status.
type OrderingKeyInfo struct {
	Key string `json:"key"`
	// LastSequence is the last sequence handled (nil: none, or no state).
	LastSequence *int64 `json:"last_sequence"`
	// BusyTaskID is the admitted task still live ("" none), BusySequence its sequence.
	BusyTaskID   string `json:"busy_task_id,omitempty"`
	BusySequence *int64 `json:"busy_sequence,omitempty"`
	// DrainDueAt is when the key's drain runs next (nil: none scheduled);
	// DrainStep how far along its backoff schedule it is.
	DrainDueAt *time.Time `json:"drain_due_at"`
	DrainStep  int        `json:"drain_step"`
	// ExpiresAt is when the key's state is forgotten without activity (nil:
	// no state yet, only tasks not examined).
	ExpiresAt *time.Time `json:"expires_at"`
	// The key's tasks waiting in state buffered, by ordering status:
	// Buffered behind a gap (or a first hold), Held not examined yet,
	// Ready released and waiting their turn, Replay replayed from the
	// dead-letter queue.
	Buffered int `json:"buffered"`
	Held     int `json:"held"`
	Ready    int `json:"ready"`
	Replay   int `json:"replay"`
}

// OrderingSettings are a queue's ordering settings as the store applies them.
type OrderingSettings struct {
	Step           int64           // expected step; 0: any newer sequence is next
	Backoff        []time.Duration // drain schedule; used up: give up
	CircuitBreaker int             // buffer size that releases everything
	KeyTTL         time.Duration   // key state lifetime, extended on activity
	// FirstHold: a key without state buffers its first tasks this long, so
	// a predecessor that was overtaken is ordered in front (0: admit at once).
	FirstHold time.Duration
	// RunLate: a task not newer than its key's last sequence (or repeating
	// one) runs in its key's turn instead of being canceled as stale.
	RunLate bool
	// Decide is the engine's ordering policy (internal/ordering.Decide):
	// Order hands it each key's state and waiting tasks and applies what it
	// returns. The store holds no policy of its own; Order refuses
	// settings without it.
	Decide OrderingPolicy
}

// OrderingPolicy applies the ordering rules to one key: it mutates k and
// returns the task actions and events (in order) and what it counted.
type OrderingPolicy func(k *OrderingKeyState, tasks []OrderingTask, set OrderingSettings, now time.Time) ([]OrderingAction, []bt.Event, OrderingDelta)

// ErrNoOrderingPolicy: Order was called with settings that carry no Decide.
var ErrNoOrderingPolicy = errors.New("store: ordering settings carry no Decide (the engine's ordering policy)")

// OrderingInfo is one task's ordering data, with what its key's state says
// about why it waits (read in the same query; no lock is taken).
type OrderingInfo struct {
	Key      string
	Sequence int64
	Gaps     []bt.Gap
	// Status is the task's ordering status (OrdHeld, OrdGap, OrdReady,
	// OrdReplay, OrdDone, OrdReplayed).
	Status string
	// LastSequence is the key's last handled sequence (nil: none yet).
	LastSequence *int64
	// BusyTaskID is the key's admitted task while it is live ("" none),
	// BusySequence its sequence.
	BusyTaskID   string
	BusySequence int64
	// DrainDueAt is when the key's drain runs next (nil: none scheduled).
	DrainDueAt *time.Time
}

// OrderingDelta counts what one Order call did.
type OrderingDelta struct {
	Buffered, Released, DrainScheduled, DrainRescheduled, Cleared int64
	Timeout, CircuitBreaker, Stale, GapsReported, Admitted        int64
	FirstHeld                                                     int64 // of Buffered: held by FirstHold
	GapsClosed                                                    int64 // replays that succeeded
}

// Add accumulates d2 into d.
func (d *OrderingDelta) Add(d2 OrderingDelta) {
	d.Buffered += d2.Buffered
	d.Released += d2.Released
	d.DrainScheduled += d2.DrainScheduled
	d.DrainRescheduled += d2.DrainRescheduled
	d.Cleared += d2.Cleared
	d.Timeout += d2.Timeout
	d.CircuitBreaker += d2.CircuitBreaker
	d.Stale += d2.Stale
	d.GapsReported += d2.GapsReported
	d.Admitted += d2.Admitted
	d.FirstHeld += d2.FirstHeld
	d.GapsClosed += d2.GapsClosed
}

// Statuses of a task in the ordering table.
const (
	OrdHeld  = "held"  // enqueued, not examined yet
	OrdGap   = "gap"   // buffered behind a gap
	OrdReady = "ready" // released, waits its turn (one at a time per key)
	OrdDone  = "admitted"
	// OrdReplay: replayed from the dead-letter queue by an operator; it is
	// not judged by its sequence (never stale, no gap) and waits only for
	// its key to be free.
	OrdReplay   = "replay"
	OrdReplayed = "replayed" // a replay admitted
)

// OrderingKeyState is one key's state as a driver loads it.
type OrderingKeyState struct {
	Queue, Key   string
	HasLast      bool
	Last         int64
	BusyTask     string // admitted task still live; "" none
	BusySeq      int64
	BusyDone     bool   // the busy task reached a terminal state (or is gone)
	BusyReplay   bool   // the busy task is a replay: its end does not move Last
	BusyOK       bool   // the busy task succeeded (a replay's success closes its gap)
	BusyKind     string // the busy task's kind (for its events)
	DrainDue     time.Time
	DrainStep    int
	ExpiresAt    time.Time
	Exists       bool // a row exists
	NeedsRemoval bool // set by the policy: delete the row
}

// OrderingTask is one not-yet-admitted task of a key.
type OrderingTask struct {
	ID     string
	Kind   string
	Seq    int64
	Status string
}

// Rows is the part of a result set both drivers' rows offer (pgx.Rows and
// *sql.Rows); the caller closes them.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// CollectOrderingTasks reads rows of (key, task id, kind, seq, status), in key
// and seq order, into each key's waiting tasks.
func CollectOrderingTasks(rows Rows, keys int) (map[string][]OrderingTask, error) {
	tasks := make(map[string][]OrderingTask, keys)
	for rows.Next() {
		var (
			key string
			t   OrderingTask
		)
		if err := rows.Scan(&key, &t.ID, &t.Kind, &t.Seq, &t.Status); err != nil {
			return nil, err
		}
		tasks[key] = append(tasks[key], t)
	}
	return tasks, rows.Err()
}

// OrderingAction is what the policy (OrderingSettings.Decide) asks the driver to apply to one task.
type OrderingAction struct {
	TaskID string
	// NewStatus: held/gap/ready/admitted; "stale" cancels the task.
	NewStatus string
	Gaps      []bt.Gap
	Error     string // for stale
}

// Ordering event types.
const (
	EventOrderingBuffered       = "ordering.buffered"
	EventOrderingReleased       = "ordering.released"
	EventOrderingStale          = "ordering.stale"
	EventOrderingGapReported    = "ordering.gap_reported"
	EventOrderingTimeout        = "ordering.timeout"
	EventOrderingCircuitBreaker = "ordering.circuit_breaker"
	// EventOrderingGapClosed: a replayed task of the key succeeded, so the
	// sequence its dead letter left unhandled is handled (on the replay's
	// history; body {"key","from","to"}).
	EventOrderingGapClosed = "ordering.gap_closed"
)

// EncodeGaps is the stored form of a task's gaps ("" for none).
func EncodeGaps(g []bt.Gap) string {
	if len(g) == 0 {
		return ""
	}
	b, _ := json.Marshal(g)
	return string(b)
}
