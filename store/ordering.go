package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// Ordered processing (docs/ordering.md). A task of an ordering queue that
// carries an ordering key is enqueued in state buffered with a row in the
// driver's ordering table (status held). Order — called by the engine
// before it claims from the queue, and by maintenance for due drains —
// examines every key of the queue with work, in one transaction, and
// applies Decide: stale tasks are canceled, gaps buffered, drains stepped,
// and at most one task per key is admitted (made pending) at a time.

// Ordering is what a driver offers for ordered processing.
type Ordering interface {
	// Order runs admission and due drains for one queue.
	Order(ctx context.Context, queue string, set OrderingSettings, now time.Time) (OrderingDelta, error)
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
}

// OrderingInfo is one task's ordering data.
type OrderingInfo struct {
	Key      string
	Sequence int64
	Gaps     []bt.Gap
}

// OrderingDelta counts what one Order call did.
type OrderingDelta struct {
	Buffered, Released, DrainScheduled, DrainRescheduled, Cleared int64
	Timeout, CircuitBreaker, Stale, GapsReported, Admitted        int64
	FirstHeld                                                     int64 // of Buffered: held by FirstHold
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
	BusyDone     bool // the busy task reached a terminal state (or is gone)
	BusyReplay   bool // the busy task is a replay: its end does not move Last
	DrainDue     time.Time
	DrainStep    int
	ExpiresAt    time.Time
	Exists       bool // a row exists
	NeedsRemoval bool // set by Decide: delete the row
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

// OrderingAction is what Decide asks the driver to apply to one task.
type OrderingAction struct {
	TaskID string
	// NewStatus: held/gap/ready/admitted; "stale" cancels the task.
	NewStatus string
	Gaps      []bt.Gap
	Error     string // for stale
}

// Decide applies the ordering rules to one key. It mutates k and returns the
// task actions and events (in order) and what it counted.
func Decide(k *OrderingKeyState, tasks []OrderingTask, set OrderingSettings, now time.Time) ([]OrderingAction, []bt.Event, OrderingDelta) {
	var (
		acts []OrderingAction
		evs  []bt.Event
		d    OrderingDelta
	)
	ev := func(typ string, t OrderingTask, body string) {
		evs = append(evs, NewEvent(now, typ, t.ID, k.Queue, t.Kind, "backstop", []byte(body)))
	}
	if k.Exists && !k.ExpiresAt.IsZero() && now.After(k.ExpiresAt) && k.BusyTask == "" && !hasStatus(tasks, OrdGap) {
		k.HasLast = false // the key state expired: start afresh
	}
	if k.BusyTask != "" && k.BusyDone {
		if !k.BusyReplay && (!k.HasLast || k.BusySeq > k.Last) {
			k.HasLast, k.Last = true, k.BusySeq
		}
		k.BusyTask, k.BusySeq, k.BusyReplay = "", 0, false
	}
	// Replays run out of sequence order, by the operator's decision: they
	// only wait for the key to be free.
	var replays []OrderingTask
	rest := tasks[:0:0]
	for _, t := range tasks {
		if t.Status == OrdReplay {
			replays = append(replays, t)
		} else {
			rest = append(rest, t)
		}
	}
	tasks = rest
	if len(tasks) == 0 && len(replays) == 0 {
		// Nothing waits (e.g. the buffered tasks were canceled): no drain.
		k.DrainDue, k.DrainStep = time.Time{}, 0
		if k.BusyTask == "" && now.After(k.ExpiresAt) {
			k.NeedsRemoval = true
		}
		return nil, nil, d
	}
	k.ExpiresAt = now.Add(set.KeyTTL)
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].Seq < tasks[j].Seq })
	// eff is the newest sequence handled or being handled.
	hasEff, eff := k.HasLast, k.Last
	if k.BusyTask != "" && !k.BusyReplay {
		hasEff, eff = true, k.BusySeq
	}
	// Stale: not newer than eff, or a repeated sequence.
	live := tasks[:0:0]
	for i, t := range tasks {
		dup := i > 0 && t.Seq == tasks[i-1].Seq
		if (hasEff && t.Seq <= eff) || dup {
			why := fmt.Sprintf("stale: sequence %d not newer than %d", t.Seq, eff)
			if dup {
				why = fmt.Sprintf("stale: sequence %d repeated", t.Seq)
			}
			acts = append(acts, OrderingAction{TaskID: t.ID, NewStatus: "stale", Error: why})
			ev(EventOrderingStale, t, fmt.Sprintf(`{"key":%q,"sequence":%d,"last":%d}`, k.Key, t.Seq, eff))
			d.Stale++
			continue
		}
		live = append(live, t)
	}
	tasks = live
	next := func(prev int64, seq int64) bool { return set.Step <= 0 || seq == prev+set.Step }
	buffering := hasStatus(tasks, OrdGap)
	set1 := func(t *OrderingTask, st string, gaps []bt.Gap) {
		if t.Status == st && gaps == nil {
			return
		}
		t.Status = st
		acts = append(acts, OrderingAction{TaskID: t.ID, NewStatus: st, Gaps: gaps})
	}
	// chain end: the newest sequence handled, running or released (ready).
	chainEnd := func() (bool, int64) {
		h, e := hasEff, eff
		for _, t := range tasks {
			if t.Status == OrdReady {
				h, e = true, t.Seq
			}
		}
		return h, e
	}
	// First hold: a key without state (nothing handled or running, nothing
	// released) cannot tell whether its first task overtook an older one,
	// so its tasks are buffered until the hold ends; the drain then releases
	// them from the lowest sequence, with no gap before it.
	holding := set.FirstHold > 0 && !hasEff && len(tasks) > 0 && !hasStatus(tasks, OrdReady)
	if holding {
		for i := range tasks {
			if tasks[i].Status == OrdHeld {
				set1(&tasks[i], OrdGap, nil)
				ev(EventOrderingBuffered, tasks[i], fmt.Sprintf(`{"key":%q,"sequence":%d,"mode":"first_hold"}`, k.Key, tasks[i].Seq))
				d.Buffered++
				d.FirstHeld++
			}
		}
		if k.DrainDue.IsZero() {
			k.DrainDue, k.DrainStep = now.Add(set.FirstHold), 0
		}
		buffering = true
	} else if buffering {
		for i := range tasks {
			if tasks[i].Status == OrdHeld {
				set1(&tasks[i], OrdGap, nil)
				ev(EventOrderingBuffered, tasks[i], fmt.Sprintf(`{"key":%q,"sequence":%d,"mode":"buffering"}`, k.Key, tasks[i].Seq))
				d.Buffered++
			}
		}
	} else {
		h, e := chainEnd()
		for i := range tasks {
			t := &tasks[i]
			if t.Status != OrdHeld {
				continue
			}
			if !buffering && (!h || next(e, t.Seq)) {
				set1(t, OrdReady, nil)
				h, e = true, t.Seq
				continue
			}
			set1(t, OrdGap, nil)
			ev(EventOrderingBuffered, *t, fmt.Sprintf(`{"key":%q,"sequence":%d,"expected":%d}`, k.Key, t.Seq, e+set.Step))
			d.Buffered++
			if !buffering {
				buffering = true
				k.DrainDue, k.DrainStep = now.Add(backoffAt(set.Backoff, 0)), 0
				d.DrainScheduled++
			}
		}
	}
	giveUp := func(reason string) {
		h, e := chainEnd()
		for i := range tasks {
			t := &tasks[i]
			if t.Status != OrdGap {
				continue
			}
			var gaps []bt.Gap
			if h && set.Step > 0 && t.Seq > e+set.Step {
				g := bt.Gap{From: e + set.Step, To: t.Seq - set.Step}
				gaps = []bt.Gap{g}
				ev(EventOrderingGapReported, *t, fmt.Sprintf(`{"key":%q,"from":%d,"to":%d,"reason":%q}`, k.Key, g.From, g.To, reason))
				d.GapsReported++
			}
			set1(t, OrdReady, gaps)
			ev(EventOrderingReleased, *t, fmt.Sprintf(`{"key":%q,"sequence":%d,"reason":%q}`, k.Key, t.Seq, reason))
			d.Released++
			h, e = true, t.Seq
		}
		k.DrainDue, k.DrainStep = time.Time{}, 0
		d.Cleared++
	}
	if buffering && !k.DrainDue.IsZero() && !now.Before(k.DrainDue) {
		// The drain: release the consecutive prefix.
		h, e := chainEnd()
		progress := 0
		for i := range tasks {
			t := &tasks[i]
			if t.Status != OrdGap {
				continue
			}
			if h && !next(e, t.Seq) {
				break
			}
			set1(t, OrdReady, nil)
			ev(EventOrderingReleased, *t, fmt.Sprintf(`{"key":%q,"sequence":%d,"reason":"filled"}`, k.Key, t.Seq))
			d.Released++
			h, e = true, t.Seq
			progress++
		}
		switch {
		case !hasStatus(tasks, OrdGap):
			k.DrainDue, k.DrainStep = time.Time{}, 0
			if !holding { // the end of a first hold is not a drain
				d.Cleared++
			}
		case progress > 0:
			k.DrainDue, k.DrainStep = now.Add(backoffAt(set.Backoff, 0)), 0
			if holding { // a gap remains after the first hold: the drain starts
				d.DrainScheduled++
			} else {
				d.DrainRescheduled++
			}
		case k.DrainStep+1 >= len(set.Backoff):
			first := firstGap(tasks)
			ev(EventOrderingTimeout, first, fmt.Sprintf(`{"key":%q,"buffered":%d}`, k.Key, countStatus(tasks, OrdGap)))
			d.Timeout++
			giveUp("timeout")
		default:
			k.DrainStep++
			k.DrainDue = now.Add(backoffAt(set.Backoff, k.DrainStep))
			d.DrainRescheduled++
		}
	}
	if set.CircuitBreaker > 0 && countStatus(tasks, OrdGap) >= set.CircuitBreaker {
		first := firstGap(tasks)
		ev(EventOrderingCircuitBreaker, first, fmt.Sprintf(`{"key":%q,"buffered":%d}`, k.Key, countStatus(tasks, OrdGap)))
		d.CircuitBreaker++
		giveUp("circuit_breaker")
	}
	if !hasStatus(tasks, OrdGap) {
		k.DrainDue, k.DrainStep = time.Time{}, 0
	}
	// Admission: one task at a time per key; a replay first.
	if k.BusyTask == "" && len(replays) > 0 {
		sort.Slice(replays, func(i, j int) bool { return replays[i].Seq < replays[j].Seq })
		r := replays[0]
		acts = append(acts, OrderingAction{TaskID: r.ID, NewStatus: OrdReplayed})
		k.BusyTask, k.BusySeq, k.BusyReplay = r.ID, r.Seq, true
		d.Admitted++
	}
	if k.BusyTask == "" {
		for i := range tasks {
			t := &tasks[i]
			if t.Status == OrdReady {
				t.Status = OrdDone
				acts = append(acts, OrderingAction{TaskID: t.ID, NewStatus: OrdDone})
				k.BusyTask, k.BusySeq = t.ID, t.Seq
				d.Admitted++
				break
			}
		}
	}
	return acts, evs, d
}

func backoffAt(b []time.Duration, i int) time.Duration {
	if len(b) == 0 {
		return 0
	}
	return b[min(i, len(b)-1)]
}

func hasStatus(ts []OrderingTask, st string) bool { return countStatus(ts, st) > 0 }

func countStatus(ts []OrderingTask, st string) int {
	n := 0
	for _, t := range ts {
		if t.Status == st {
			n++
		}
	}
	return n
}

func firstGap(ts []OrderingTask) OrderingTask {
	for _, t := range ts {
		if t.Status == OrdGap {
			return t
		}
	}
	return OrderingTask{}
}

// Ordering event types.
const (
	EventOrderingBuffered       = "ordering.buffered"
	EventOrderingReleased       = "ordering.released"
	EventOrderingStale          = "ordering.stale"
	EventOrderingGapReported    = "ordering.gap_reported"
	EventOrderingTimeout        = "ordering.timeout"
	EventOrderingCircuitBreaker = "ordering.circuit_breaker"
)

// EncodeGaps is the stored form of a task's gaps ("" for none).
func EncodeGaps(g []bt.Gap) string {
	if len(g) == 0 {
		return ""
	}
	b, _ := json.Marshal(g)
	return string(b)
}
