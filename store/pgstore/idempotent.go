package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// A batch's tasks whose only key is an idempotency key without a window
// are enqueued together on pgx: one look-up of every key's live task, one
// INSERT … ON CONFLICT DO NOTHING of the tasks whose key has none (from
// arrays, a statement prepared once), instead of two statements a task.
// The outcome is the one-at-a-time path's, in input order: a key's first
// task in the batch returns the live task holding it (a duplicate) or is
// inserted; the key's later tasks return that task as duplicates. A task
// the INSERT skipped (a concurrent enqueue took its key, or its id is
// taken) goes through the one-at-a-time path, which retries or names the
// conflict.

// batchIdempotent picks the tasks of keyed that enqueueIdempotent takes:
// none when fewer than two, or when a task with a window or a merge key
// also holds an idempotency key (the one-at-a-time path orders those).
func batchIdempotent(tasks []*bt.Task, keyed []int) []int {
	var idx []int
	for _, i := range keyed {
		t := tasks[i]
		if t.IdempotencyKey == "" {
			continue // merge key only: independent of idempotency keys
		}
		if t.MergeKey != "" || t.UniqueUntil != nil {
			return nil
		}
		idx = append(idx, i)
	}
	if len(idx) < 2 {
		return nil
	}
	return idx
}

// enqueueIdempotent enqueues tasks[idx] (batchIdempotent's) and writes
// their results; it returns the inserted rows whose payloads spill.
func enqueueIdempotent(ctx context.Context, db dbtx, tasks []*bt.Task, idx []int, opts store.EnqueueOpts, actor string, results []store.EnqueueResult) ([]row, error) {
	first := make(map[string]int, len(idx)) // key → its first task
	var firsts []int
	keys, ats := make([]string, 0, len(idx)), make([]time.Time, 0, len(idx))
	for _, i := range idx {
		t := tasks[i]
		if _, ok := first[t.IdempotencyKey]; ok {
			continue
		}
		first[t.IdempotencyKey] = i
		firsts = append(firsts, i)
		keys, ats = append(keys, t.IdempotencyKey), append(ats, t.CreatedAt)
	}
	holders, err := findIdempotent(ctx, db, keys, ats)
	if err != nil {
		return nil, err
	}
	var batch []row
	for _, i := range firsts {
		if holders[tasks[i].IdempotencyKey] != nil {
			continue
		}
		r, err := newRow(tasks[i], opts.InlineLimit)
		if err != nil {
			return nil, err
		}
		batch = append(batch, r)
	}
	inserted := map[string]int{}
	if len(batch) > 0 {
		if inserted, err = insertTasks(ctx, db, sqlInsertTaskArrays, append(taskArrays(batch), actor)); err != nil {
			return nil, err
		}
	}
	var spills []row
	next := 0 // batch[next] is the next first task without a holder
	for _, i := range firsts {
		t := tasks[i]
		if h := holders[t.IdempotencyKey]; h != nil {
			results[i] = store.EnqueueResult{Task: h, Duplicate: true}
			continue
		}
		r := batch[next]
		next++
		if inserted[t.ID] > 0 {
			inserted[t.ID]-- // the same id twice: the second was skipped
			results[i] = store.EnqueueResult{Task: r.stored()}
			if r.spilled {
				spills = append(spills, r)
			}
			continue
		}
		res, err := enqueueKeyed(ctx, db, t, opts, store.Debounce{}, actor)
		if err != nil {
			return nil, err
		}
		results[i] = res
	}
	for _, i := range idx {
		f := first[tasks[i].IdempotencyKey]
		if f != i {
			results[i] = store.EnqueueResult{Task: results[f].Task, Duplicate: true}
		}
	}
	return spills, nil
}

// sqlFindIdempotents is sqlFindIdempotent for every key of $1 at its time
// in $2.
var sqlFindIdempotents = `SELECT t.* FROM unnest($1::text[], $2::timestamptz[]) AS k(key, at)
CROSS JOIN LATERAL (` + selectTasks + `
	WHERE t.idempotency_key = k.key AND ((t.unique_until IS NULL AND t.state IN ('scheduled', 'pending', 'running', 'buffered'))
		OR t.unique_until > k.at)
	ORDER BY t.created_at DESC, t.id DESC LIMIT 1) t`

// findIdempotent returns the task holding each key that one holds.
func findIdempotent(ctx context.Context, db dbtx, keys []string, ats []time.Time) (map[string]*bt.Task, error) {
	rs, err := db.query(ctx, sqlFindIdempotents, keys, ats)
	if err != nil {
		return nil, fmt.Errorf("pgstore: enqueue: idempotency keys: %w", err)
	}
	defer rs.Close()
	found := make(map[string]*bt.Task)
	for rs.Next() {
		t, err := scanTask(rs)
		if err != nil {
			return nil, fmt.Errorf("pgstore: enqueue: idempotency keys: %w", err)
		}
		found[t.IdempotencyKey] = t
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: enqueue: idempotency keys: %w", err)
	}
	return found, nil
}

// sqlInsertTaskArrays is sqlInsertTasks (any unique index may conflict)
// with the tasks' columns as arrays (taskArrays), in their order; the
// actor is the last parameter.
var sqlInsertTaskArrays = insertTaskArraysSQL("ON CONFLICT DO NOTHING", false)

// insertTaskArraysSQL is the insert of taskArrays' rows with onConflict,
// counting its rows when counted.
func insertTaskArraysSQL(onConflict string, counted bool) string {
	counting := ""
	if counted {
		counting = ", " + countedInsert
	}
	types := []string{"text", "text", "text", "text", "int", "int", "int",
		"text", "int", "bool", "text", "timestamptz", "timestamptz", "timestamptz",
		"bigint", "timestamptz", "text", "text", "text",
		"int", "int", "float8", "text", "text"}
	casts := map[string]string{"payload": "::json", "attributes": "::jsonb", "retry_policy": "::jsonb"}
	var params, cols []string
	for i, c := range insertColumns {
		params = append(params, "$"+strconv.Itoa(i+1)+"::"+types[i]+"[]")
		cols = append(cols, "u."+c+casts[c])
	}
	return "WITH " + enqueueSeq + ", ins AS (INSERT INTO backstop_tasks (" + strings.Join(insertColumns, ", ") + ", event_links)\n" +
		"SELECT " + strings.Join(cols, ", ") + ", (SELECT ARRAY[seq] FROM ev_seq)\n" +
		"FROM unnest(" + strings.Join(params, ", ") + ") WITH ORDINALITY AS u(" + strings.Join(insertColumns, ", ") + ", o)\n" +
		"ORDER BY u.o " + onConflict + " RETURNING " + enqueuedReturning + "), " +
		enqueuedEvents(len(insertColumns)+1) + counting + " SELECT id FROM ins"
}

// taskArrays is batch's columns in insertColumns order, one array each.
func taskArrays(batch []row) []any {
	n := len(batch)
	var (
		id, queue, kind, state                       = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		priority, attempt, maxAttempts, payloadSize  = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		progressTotal, progressCompleted, timeoutUS  = make([]int64, n), make([]int64, n), make([]int64, n)
		payload, attributes, retry                   = make([]*string, n), make([]*string, n), make([]*string, n)
		idemKey, mergeKey, traceParent, replayedFrom = make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
		spilled                                      = make([]bool, n)
		runAt, createdAt, updatedAt                  = make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
		deadline                                     = make([]*time.Time, n)
		complexity                                   = make([]float64, n)
	)
	opt := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	for i, r := range batch {
		t := r.task
		id[i], queue[i], kind[i], state[i] = t.ID, t.Queue, t.Kind, string(t.State)
		priority[i], attempt[i], maxAttempts[i] = int64(t.Priority), int64(t.Attempt), int64(t.MaxAttempts)
		if r.inline != nil {
			p := string(r.inline)
			payload[i] = &p
		}
		payloadSize[i], spilled[i] = int64(len(t.Payload)), r.spilled
		attributes[i], retry[i] = opt(string(r.attributes)), opt(string(r.retry))
		runAt[i], createdAt[i], updatedAt[i] = t.RunAt, t.CreatedAt, t.UpdatedAt
		timeoutUS[i], deadline[i] = time.Duration(t.Timeout).Microseconds(), t.Deadline
		idemKey[i], mergeKey[i] = opt(t.IdempotencyKey), opt(t.MergeKey)
		progressTotal[i], progressCompleted[i], complexity[i] = int64(t.Progress.Total), int64(t.Progress.Completed), t.Complexity
		traceParent[i], replayedFrom[i] = opt(t.TraceParent), opt(t.ReplayedFrom)
	}
	return []any{id, queue, kind, state, priority, attempt, maxAttempts,
		payload, payloadSize, spilled, attributes, runAt, createdAt, updatedAt,
		timeoutUS, deadline, retry, idemKey, mergeKey,
		progressTotal, progressCompleted, complexity, traceParent, replayedFrom}
}
