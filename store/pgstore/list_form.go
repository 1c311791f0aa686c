package pgstore

import (
	"context"
	"slices"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// listForm is how List reads a page, picked from the kept counts (counts.go)
// of the filter's states read in the page's snapshot, so that a page costs what its states hold and
// never the whole history (a walk of the primary key past every finished
// task when the states hold few or none of the table's rows).
type listForm int

const (
	// listWalk orders by id straight away: the planner walks the primary
	// key and stops at the page's last match, early when matches are many.
	listWalk listForm = iota
	// listSorted picks the page's ids sorted by the id as an expression,
	// which no index gives, so that the planner reads the states' partial
	// indexes (their matching rows, whatever else the table holds) and
	// sorts them.
	listSorted
	// listEmpty: the kept counts hold no task of the filter's states (in
	// its queue, when it names one); no statement runs.
	listEmpty
)

// queueLedStates are the states whose partial indexes lead with the queue
// (the claim index, backstop_tasks_running, backstop_tasks_counts): with a
// queue, reading them costs the queue's rows. The finished states' index
// (backstop_tasks_finished) holds every queue's.
var queueLedStates = []bt.State{bt.StatePending, bt.StateRunning, bt.StateScheduled, bt.StateBuffered, bt.StateDead}

// sqlListCounts is, per state, the kept count of queue $1's tasks (every
// queue's when $1 is empty) and every queue's: the counts plus the deltas
// not folded yet, read in one snapshot, so exact as of it.
const sqlListCounts = `SELECT state,
	coalesce(sum(n) FILTER (WHERE $1 = '' OR queue = $1), 0)::bigint,
	coalesce(sum(n), 0)::bigint
FROM (SELECT queue, state, n FROM backstop_task_counts
	UNION ALL SELECT queue, state, n FROM backstop_task_count_deltas) u
GROUP BY state`

// listCountsVersion is the first schema version that keeps the counts.
const listCountsVersion = 59

// listCounted is whether List picks f's form from the kept counts: f
// names states, and the schema keeps the counts.
func (s *Store) listCounted(f store.ListFilter) bool {
	v := s.schemaAt.Load()
	return len(f.States) > 0 && (v == 0 || v >= listCountsVersion)
}

// listFormOn picks f's form from the kept counts read on q, and the
// states of f that hold tasks (in its queue): the others can be left out
// of a statement read in the same snapshot.
func listFormOn(ctx context.Context, q querier, f store.ListFilter) (listForm, []bt.State, error) {
	rows, err := q.Query(ctx, sqlListCounts, f.Queue)
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	type count struct{ inQueue, queues int64 }
	counts := map[bt.State]count{}
	var total int64
	for rows.Next() {
		var (
			st bt.State
			c  count
		)
		if err := rows.Scan(&st, &c.inQueue, &c.queues); err != nil {
			return 0, nil, err
		}
		counts[st] = c
		total += c.queues
	}
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	var (
		held           []bt.State
		matching, read int64
	)
	for _, st := range f.States { // in f's order: one statement text per filter
		c := counts[st]
		if c.inQueue <= 0 || slices.Contains(held, st) {
			continue
		}
		held = append(held, st)
		matching += c.inQueue
		if f.Queue != "" && slices.Contains(queueLedStates, st) {
			read += c.inQueue
		} else {
			read += c.queues
		}
	}
	return pickListForm(matching, read, total), held, nil
}

// pickListForm is the form for a filter whose states hold matching tasks
// (in its queue), read through their indexes, of a table of total tasks.
func pickListForm(matching, read, total int64) listForm {
	switch {
	case matching <= 0:
		return listEmpty
	case store.ListReadSorted(read, total):
		return listSorted
	default:
		return listWalk
	}
}
