package sqlitestore

import (
	"context"
	"database/sql"
	"slices"
	"strings"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// A list page costs what its states hold, never the whole history: with a
// state filter, List reads the kept counts (counts.go) in its own read
// transaction, drops the states that hold no task (in the filter's queue),
// answers an empty page when none is left, and reads the rest through
// their partial indexes, sorted, when those hold few rows; otherwise it
// walks the primary key by id, which finds many matches early.

// listIndexes is the partial index's predicate (as written in the index)
// that holds each state's tasks, and whether the index leads with the
// queue (a queue's rows then cost what the queue holds). A buffered task
// has no index of its state.
var listIndexes = map[bt.State]struct {
	pred      string
	queueLead bool
}{
	bt.StatePending:   {"state = 'pending'", true},                                           // backstop_tasks_claim
	bt.StateRunning:   {"state = 'running'", true},                                           // backstop_tasks_running
	bt.StateScheduled: {"state = 'scheduled'", false},                                        // backstop_tasks_scheduled
	bt.StateDead:      {"state = 'dead'", false},                                             // backstop_tasks_dead
	bt.StateSucceeded: {"state IN ('succeeded', 'canceled') AND state = 'succeeded'", false}, // backstop_tasks_finished
	bt.StateCanceled:  {"state IN ('succeeded', 'canceled') AND state = 'canceled'", false},
}

// listHeld is, of f's states, those that hold a task (in f's queue) by
// the kept counts read in tx, and whether their indexes hold few enough
// rows to be read and sorted (sorted).
func listHeld(ctx context.Context, tx *sql.Tx, f store.ListFilter) (held []bt.State, sorted bool, err error) {
	rows, err := tx.QueryContext(ctx, `SELECT state, sum(CASE WHEN ? = '' OR queue = ? THEN n ELSE 0 END), sum(n)
		FROM backstop_task_counts GROUP BY state`, f.Queue, f.Queue)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	var read, total int64
	sorted = true
	for rows.Next() {
		var (
			st              bt.State
			inQueue, queues int64
		)
		if err := rows.Scan(&st, &inQueue, &queues); err != nil {
			return nil, false, err
		}
		total += queues
		if !slices.Contains(f.States, st) || inQueue <= 0 {
			continue
		}
		held = append(held, st)
		ix, ok := listIndexes[st]
		sorted = sorted && ok
		if f.Queue != "" && ix.queueLead {
			read += inQueue
		} else {
			read += queues
		}
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	return held, sorted && store.ListReadSorted(read, total), nil
}

// sortedListQuery is List's statement that reads the held states' rows
// through their partial indexes, one arm per state (each arm's condition
// names its index's predicate as written), the page's ids sorted by the
// id as an expression (+id: no index gives it), then the page's rows:
// cols, where's conditions and args, the order dir, the limit.
func sortedListQuery(cols string, where []string, args []any, held []bt.State, dir string, limit int) (string, []any) {
	var (
		arms []string
		all  []any
	)
	for _, st := range held {
		cond := append(slices.Clip(where), listIndexes[st].pred)
		arms = append(arms, "SELECT id FROM (SELECT id FROM backstop_tasks WHERE "+strings.Join(cond, " AND ")+
			" ORDER BY +id "+dir+" LIMIT ?)")
		all = append(append(all, args...), limit)
	}
	q := "SELECT " + cols + " FROM backstop_tasks WHERE id IN (SELECT id FROM (" + strings.Join(arms, " UNION ALL ") +
		") ORDER BY id " + dir + " LIMIT ?) ORDER BY id " + dir + " LIMIT ?"
	return q, append(all, limit, limit)
}
