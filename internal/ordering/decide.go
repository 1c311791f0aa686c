// Package ordering is the engine's ordering policy (docs/ordering.md):
// given one key's state and its waiting tasks, Decide says which tasks are
// stale, buffered behind a gap, released or admitted, when a drain is due,
// and what events that makes. Pure: no database, no clock (time is a
// parameter). The drivers apply its answer inside their Order transaction;
// the engine hands it to them in store.OrderingSettings.Decide, so the
// store package holds no policy.
package ordering

import (
	"fmt"
	"sort"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Decide applies the ordering rules to one key. It mutates k and returns the
// task actions and events (in order) and what it counted.
func Decide(k *store.OrderingKeyState, tasks []store.OrderingTask, set store.OrderingSettings, now time.Time) ([]store.OrderingAction, []bt.Event, store.OrderingDelta) {
	var (
		acts []store.OrderingAction
		evs  []bt.Event
		d    store.OrderingDelta
	)
	ev := func(typ string, t store.OrderingTask, body string) {
		evs = append(evs, store.NewEvent(now, typ, t.ID, k.Queue, t.Kind, "backstop", []byte(body)))
	}
	if k.Exists && !k.ExpiresAt.IsZero() && now.After(k.ExpiresAt) && k.BusyTask == "" && !hasStatus(tasks, store.OrdGap) {
		k.HasLast = false // the key state expired: start afresh
	}
	if k.BusyTask != "" && k.BusyDone {
		if !k.BusyReplay && (!k.HasLast || k.BusySeq > k.Last) {
			k.HasLast, k.Last = true, k.BusySeq
		}
		if k.BusyReplay && k.BusyOK {
			// The replay succeeded: the sequence its dead letter left
			// unhandled is handled now (docs/ordering.md).
			evs = append(evs, store.NewEvent(now, store.EventOrderingGapClosed, k.BusyTask, k.Queue, k.BusyKind, "backstop",
				[]byte(fmt.Sprintf(`{"key":%q,"from":%d,"to":%d}`, k.Key, k.BusySeq, k.BusySeq))))
			d.GapsClosed++
		}
		k.BusyTask, k.BusySeq, k.BusyReplay, k.BusyOK, k.BusyKind = "", 0, false, false, ""
	}
	// Replays run out of sequence order, by the operator's decision: they
	// only wait for the key to be free.
	var replays []store.OrderingTask
	rest := tasks[:0:0]
	for _, t := range tasks {
		if t.Status == store.OrdReplay {
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
		return nil, evs, d
	}
	k.ExpiresAt = now.Add(set.KeyTTL)
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].Seq < tasks[j].Seq })
	// eff is the newest sequence handled or being handled.
	hasEff, eff := k.HasLast, k.Last
	if k.BusyTask != "" && !k.BusyReplay {
		hasEff, eff = true, k.BusySeq
	}
	// Stale: not newer than eff, or a repeated sequence (unless late tasks
	// run: then they are next in line, in sequence order).
	live := tasks[:0:0]
	for i, t := range tasks {
		dup := i > 0 && t.Seq == tasks[i-1].Seq
		if ((hasEff && t.Seq <= eff) || dup) && !set.RunLate {
			why := fmt.Sprintf("stale: sequence %d not newer than %d", t.Seq, eff)
			if dup {
				why = fmt.Sprintf("stale: sequence %d repeated", t.Seq)
			}
			acts = append(acts, store.OrderingAction{TaskID: t.ID, NewStatus: "stale", Error: why})
			ev(store.EventOrderingStale, t, fmt.Sprintf(`{"key":%q,"sequence":%d,"last":%d}`, k.Key, t.Seq, eff))
			d.Stale++
			continue
		}
		live = append(live, t)
	}
	tasks = live
	next := func(prev int64, seq int64) bool { return set.Step <= 0 || seq == prev+set.Step }
	buffering := hasStatus(tasks, store.OrdGap)
	set1 := func(t *store.OrderingTask, st string, gaps []bt.Gap) {
		if t.Status == st && gaps == nil {
			return
		}
		t.Status = st
		acts = append(acts, store.OrderingAction{TaskID: t.ID, NewStatus: st, Gaps: gaps})
	}
	// chain end: the newest sequence handled, running or released (ready).
	chainEnd := func() (bool, int64) {
		h, e := hasEff, eff
		for _, t := range tasks {
			if t.Status == store.OrdReady {
				h, e = true, t.Seq
			}
		}
		return h, e
	}
	// First hold: a key without state (nothing handled or running, nothing
	// released) cannot tell whether its first task overtook an older one,
	// so its tasks are buffered until the hold ends; the drain then releases
	// them from the lowest sequence, with no gap before it.
	holding := set.FirstHold > 0 && !hasEff && len(tasks) > 0 && !hasStatus(tasks, store.OrdReady)
	if holding {
		for i := range tasks {
			if tasks[i].Status == store.OrdHeld {
				set1(&tasks[i], store.OrdGap, nil)
				ev(store.EventOrderingBuffered, tasks[i], fmt.Sprintf(`{"key":%q,"sequence":%d,"mode":"first_hold"}`, k.Key, tasks[i].Seq))
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
			if tasks[i].Status == store.OrdHeld {
				set1(&tasks[i], store.OrdGap, nil)
				ev(store.EventOrderingBuffered, tasks[i], fmt.Sprintf(`{"key":%q,"sequence":%d,"mode":"buffering"}`, k.Key, tasks[i].Seq))
				d.Buffered++
			}
		}
	} else {
		h, e := chainEnd()
		for i := range tasks {
			t := &tasks[i]
			if t.Status != store.OrdHeld {
				continue
			}
			if !buffering && (!h || next(e, t.Seq) || (set.RunLate && t.Seq <= e)) {
				set1(t, store.OrdReady, nil)
				if !h || t.Seq > e {
					h, e = true, t.Seq
				}
				continue
			}
			set1(t, store.OrdGap, nil)
			ev(store.EventOrderingBuffered, *t, fmt.Sprintf(`{"key":%q,"sequence":%d,"expected":%d}`, k.Key, t.Seq, e+set.Step))
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
			if t.Status != store.OrdGap {
				continue
			}
			var gaps []bt.Gap
			if h && set.Step > 0 && t.Seq > e+set.Step {
				g := bt.Gap{From: e + set.Step, To: t.Seq - set.Step}
				gaps = []bt.Gap{g}
				ev(store.EventOrderingGapReported, *t, fmt.Sprintf(`{"key":%q,"from":%d,"to":%d,"reason":%q}`, k.Key, g.From, g.To, reason))
				d.GapsReported++
			}
			set1(t, store.OrdReady, gaps)
			ev(store.EventOrderingReleased, *t, fmt.Sprintf(`{"key":%q,"sequence":%d,"reason":%q}`, k.Key, t.Seq, reason))
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
			if t.Status != store.OrdGap {
				continue
			}
			if h && !next(e, t.Seq) {
				break
			}
			set1(t, store.OrdReady, nil)
			ev(store.EventOrderingReleased, *t, fmt.Sprintf(`{"key":%q,"sequence":%d,"reason":"filled"}`, k.Key, t.Seq))
			d.Released++
			h, e = true, t.Seq
			progress++
		}
		switch {
		case !hasStatus(tasks, store.OrdGap):
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
			ev(store.EventOrderingTimeout, first, fmt.Sprintf(`{"key":%q,"buffered":%d}`, k.Key, countStatus(tasks, store.OrdGap)))
			d.Timeout++
			giveUp("timeout")
		default:
			k.DrainStep++
			k.DrainDue = now.Add(backoffAt(set.Backoff, k.DrainStep))
			d.DrainRescheduled++
		}
	}
	if set.CircuitBreaker > 0 && countStatus(tasks, store.OrdGap) >= set.CircuitBreaker {
		first := firstGap(tasks)
		ev(store.EventOrderingCircuitBreaker, first, fmt.Sprintf(`{"key":%q,"buffered":%d}`, k.Key, countStatus(tasks, store.OrdGap)))
		d.CircuitBreaker++
		giveUp("circuit_breaker")
	}
	if !hasStatus(tasks, store.OrdGap) {
		k.DrainDue, k.DrainStep = time.Time{}, 0
	}
	// Admission: one task at a time per key; a replay first.
	if k.BusyTask == "" && len(replays) > 0 {
		sort.Slice(replays, func(i, j int) bool { return replays[i].Seq < replays[j].Seq })
		r := replays[0]
		acts = append(acts, store.OrderingAction{TaskID: r.ID, NewStatus: store.OrdReplayed})
		k.BusyTask, k.BusySeq, k.BusyReplay = r.ID, r.Seq, true
		d.Admitted++
	}
	if k.BusyTask == "" {
		for i := range tasks {
			t := &tasks[i]
			if t.Status == store.OrdReady {
				t.Status = store.OrdDone
				acts = append(acts, store.OrderingAction{TaskID: t.ID, NewStatus: store.OrdDone})
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

func hasStatus(ts []store.OrderingTask, st string) bool { return countStatus(ts, st) > 0 }

func countStatus(ts []store.OrderingTask, st string) int {
	n := 0
	for _, t := range ts {
		if t.Status == st {
			n++
		}
	}
	return n
}

func firstGap(ts []store.OrderingTask) store.OrderingTask {
	for _, t := range ts {
		if t.Status == store.OrdGap {
			return t
		}
	}
	return store.OrderingTask{}
}
