package pgstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/internal/sqldialect"
)

// pipelineRows bounds what WritePlan sends as one pipeline: at most this
// many runs, step rows, tasks and events each (each kind one statement of
// arrays). Larger plans (a very wide fan-out, a
// batch start of more runs) go statement by statement, whose statements
// take a thousand rows each. It was 64: a settle batch finishing more
// than 32 steps of linear workflows (two events and two step rows a
// step) and a batch start of 100 runs left the pipeline for five to
// seven round trips, its events in statements planned per call
// (docs/benchmarks.md, branch wfround).
const pipelineRows = 256

// WritePlan is store.WorkflowTx's WritePlan inside tx: its statements (the
// new runs, the run updates, the step rows, the tasks with their
// task.enqueued events and spilled payloads, the events; the queues'
// NOTIFY after the COMMIT in the store's own transaction, sqlWakeAfterCommit,
// or in the caller's) are sent as one pipeline, one round trip, and their outcomes read
// in order; each kind of row is one statement of arrays (the runs, the
// step rows, the tasks, the events: one each for any number), so each
// stays one cached prepared statement. Tasks with an idempotency, merge or
// ordering key, and plans over pipelineRows, are written one operation
// after the other (store.WritePlanInSteps).
//
// In the store's own transaction (InTx), when every run it updates is
// locked in the transaction, the pipeline is held and sent with the
// COMMIT (or before the next statement): one round trip for the plan and
// the commit. Its statements then judge nothing after the server ran them
// (planPipeline's strict; the locked runs exist, so the run updates find
// them all), and a failure among them is reported by the commit or the
// next statement, with nothing of the transaction written.
func (t Txs) WritePlan(ctx context.Context, tx pgx.Tx, w store.PlanWrite) ([]store.EnqueueResult, error) {
	if !pipelined(w) {
		if len(w.Inserts) > 1 {
			if err := insertRuns(ctx, tx, w.Inserts); err != nil {
				return nil, err
			}
			w.Inserts = nil
		}
		return store.WritePlanInSteps(ctx, t, tx, w)
	}
	own, ok := tx.(*pipeTx)
	if ok && own.holdsRuns(w.Updates) {
		p, results, err := planPipeline(ctx, w, true, t.s.insertsCounted())
		if err != nil {
			return nil, err
		}
		own.holdForCommit(p)
		own.wakeAtCommit(p.wake)
		return results, nil
	}
	p, results, err := planPipeline(ctx, w, false, t.s.insertsCounted())
	if err != nil {
		return nil, err
	}
	if ok {
		own.wakeAtCommit(p.wake)
	} else {
		p.notifyInTx() // the caller commits
	}
	if err := p.send(ctx, tx); err != nil {
		return nil, err
	}
	return results, nil
}

// WritePlan is store.Store's WritePlan: a plan without run updates that
// the pipeline takes is sent as one pipeline, one round trip: BEGIN, its
// writes, COMMIT and, after it, the wake-up of the queues it gave pending
// tasks (sqlWakeAfterCommit: not in the transaction, whose commit would
// then wait on the cluster's notify lock). A run or task id that exists
// fails its statement (no ON CONFLICT), and the server skips the rest:
// the transaction rolls back. Any other plan: WritePlan in a transaction
// of its own.
func (s *Store) WritePlan(ctx context.Context, w store.PlanWrite) ([]store.EnqueueResult, error) {
	if !pipelined(w) || len(w.Updates) > 0 {
		var res []store.EnqueueResult
		err := s.InTx(ctx, func(tx store.Tx) error {
			var err error
			res, err = tx.WritePlan(ctx, w)
			return err
		})
		return res, err
	}
	p, results, err := planPipeline(ctx, w, true, s.insertsCounted())
	if err != nil {
		return nil, err
	}
	tx, err := s.Txs().Begin(ctx)
	if err != nil {
		return nil, err
	}
	own := tx.(*pipeTx)
	own.holdForCommit(p)
	own.wakeAtCommit(p.wake)
	if err := own.Commit(ctx); err != nil { // a failure ends it rolled back
		return nil, err
	}
	return results, nil
}

// planPipeline is the pipeline of w (pipelined(w)) and the enqueue results
// it gives when it succeeds. strict: no statement's outcome is judged
// after the server ran it (no ON CONFLICT, no row count to check: the
// pipeline runs without a transaction the client could still roll back).
// counted: the task inserts count their own rows (Store.insertsCounted).
func planPipeline(ctx context.Context, w store.PlanWrite, strict, counted bool) (*pipeline, []store.EnqueueResult, error) {
	if err := checkEnqueue(w.Tasks, w.Opts); err != nil {
		return nil, nil, err
	}
	p := &pipeline{}
	if len(w.Inserts) > 1 {
		p.runs(w.Inserts, strict)
	} else if len(w.Inserts) == 1 {
		r := w.Inserts[0]
		sql, args, err := sqldialect.WorkflowInsertRunSQL(dialect, r, strict)
		if err != nil {
			return nil, nil, err
		}
		p.exec(sql, args, func(n int64, err error) error { return sqldialect.WorkflowInsertRunResult(dialect, r, n, err) })
	}
	if len(w.Updates) > 0 {
		sql, args := updateRunsSQL(w.Updates)
		p.b.Queue(sql, args...)
		p.read = append(p.read, func(br pgx.BatchResults) error {
			tag, err := br.Exec()
			return updateRunsResult(w.Updates, tag, err)
		})
	}
	steps, err := sqldialect.WorkflowPutStepsArraysSQL(dialect, w.Steps)
	if err != nil {
		return nil, nil, err
	}
	if steps != nil {
		p.exec(steps.SQL, steps.Args, func(_ int64, err error) error {
			if err != nil {
				return sqldialect.WorkflowPutStepsErr(dialect, err)
			}
			return nil
		})
	}
	results, err := p.tasks(ctx, w.Tasks, w.Opts, strict, counted)
	if err != nil {
		return nil, nil, err
	}
	if err := store.CheckEvents(w.Events); err != nil {
		return nil, nil, err
	}
	if events := slices.Concat(w.Opts.Events, w.Events); len(events) > 0 {
		args, err := eventsArraysArgs(events)
		if err != nil {
			return nil, nil, err
		}
		p.exec(sqlEventsArrays, args, wrapped("pgstore: events"))
	}
	return p, results, nil
}

// pipelined: w is written as one pipeline (WritePlan).
func pipelined(w store.PlanWrite) bool {
	if len(w.Inserts) > pipelineRows || len(w.Steps) > pipelineRows || len(w.Tasks) > pipelineRows ||
		len(w.Events)+len(w.Opts.Events) > pipelineRows || len(w.Opts.Debounce) > 0 {
		return false
	}
	for _, t := range w.Tasks {
		if t != nil && (t.IdempotencyKey != "" || t.MergeKey != "" || t.OrderingKey != "") {
			return false
		}
	}
	return true
}

// pipeline is statements sent together (a pgx.Batch in the caller's
// transaction), each with what reads its outcome.
type pipeline struct {
	b    pgx.Batch
	read []func(pgx.BatchResults) error
	// wake: the queues its tasks made pending, to NOTIFY. The store's
	// own transaction wakes them after its COMMIT (pipeTx.wakeAtCommit);
	// in a caller's, notifyInTx adds the NOTIFY to the pipeline.
	wake []string
}

// notifyInTx adds the NOTIFY of p.wake to the pipeline: in a transaction
// the caller commits, where NOTIFY is delivered at that commit.
func (p *pipeline) notifyInTx() {
	if len(p.wake) == 0 {
		return
	}
	p.exec(sqlNotifyQueues, []any{p.wake}, wrapped("pgstore: enqueue: notify"))
	p.wake = nil
}

// runs adds the insert of new runs (a batch start's) as one statement of
// arrays (insertRunsSQL).
func (p *pipeline) runs(rs []store.RunRecord, strict bool) {
	if strict {
		p.exec(sqlInsertRunsStrict, insertRunsArgs(rs), func(_ int64, err error) error {
			if err != nil {
				return insertRunsErr(err)
			}
			return nil
		})
		return
	}
	p.b.Queue(sqlInsertRuns, insertRunsArgs(rs)...)
	p.read = append(p.read, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return insertRunsErr(err)
		}
		return insertedAll(rs, rows)
	})
}

// exec adds a statement whose outcome is its row count.
func (p *pipeline) exec(sql string, args []any, outcome func(n int64, err error) error) {
	p.b.Queue(sql, args...)
	p.read = append(p.read, func(br pgx.BatchResults) error {
		tag, err := br.Exec()
		return outcome(tag.RowsAffected(), err)
	})
}

// tasks adds the enqueue of tasks without keys (enqueue's plain path):
// their inserts with their task.enqueued events, their spilled payloads;
// the queues that got a pending task are p.wake, for the sender to
// NOTIFY. The results are filled in when the pipeline is sent;
// opts.Events are the caller's to add.
// strict: a taken id fails the insert (store.ErrConflict).
func (p *pipeline) tasks(ctx context.Context, tasks []*bt.Task, opts store.EnqueueOpts, strict, counted bool) ([]store.EnqueueResult, error) {
	results := make([]store.EnqueueResult, len(tasks))
	if len(tasks) == 0 {
		return results, nil
	}
	actor := store.ActorFrom(ctx, store.DefaultActor)
	var spills []row
	// One statement of arrays for any number of rows (a plan holds at
	// most pipelineRows): one text per form, so each connection prepares
	// and plans it once, not once per row count.
	batch := make([]row, len(tasks))
	for j, t := range tasks {
		r, err := newRow(t, opts.InlineLimit)
		if err != nil {
			return nil, err
		}
		batch[j] = r
		results[j] = store.EnqueueResult{Task: r.stored()}
		if r.spilled {
			spills = append(spills, r)
		}
		if t.State == bt.StatePending && !slices.Contains(p.wake, t.Queue) {
			p.wake = append(p.wake, t.Queue)
		}
	}
	p.b.Queue(planInsertSQL(strict, counted), append(taskArrays(batch), actor)...)
	p.read = append(p.read, func(br pgx.BatchResults) error {
		var inserted map[string]int
		rs, err := br.Query()
		if err != nil {
			err = fmt.Errorf("pgstore: enqueue: insert: %w", err)
		} else {
			inserted, err = countIDs(rs)
		}
		if isUniqueViolation(err) {
			return fmt.Errorf("pgstore: enqueue: a task id is taken: %w: %v", store.ErrConflict, err)
		}
		if err != nil {
			return err
		}
		return checkInserted(batch, inserted)
	})
	for start := 0; start < len(spills); start += maxPreparedRows {
		chunk := spills[start:min(start+maxPreparedRows, len(spills))]
		args := make([]any, 0, 2*len(chunk))
		for _, r := range chunk {
			args = append(args, r.task.ID, []byte(r.task.Payload))
		}
		p.exec(sqlInsertPayloads(len(chunk)), args, wrapped("pgstore: enqueue: spill payloads"))
	}
	return results, nil
}

// planInserts are a plan's task inserts (insertTaskArraysSQL's rows), by
// {strict, counted}: ON CONFLICT (id) DO NOTHING, or none (strict: a taken
// id fails the statement); counting their own rows (countedInsert) or not
// (a schema before the count mark).
var planInserts = map[[2]bool]string{
	{false, false}: insertTaskArraysSQL("ON CONFLICT (id) DO NOTHING", false),
	{false, true}:  insertTaskArraysSQL("ON CONFLICT (id) DO NOTHING", true),
	{true, false}:  insertTaskArraysSQL("", false),
	{true, true}:   insertTaskArraysSQL("", true),
}

// planInsertSQL is the plan's task insert of the form asked.
func planInsertSQL(strict, counted bool) string { return planInserts[[2]bool{strict, counted}] }

// wrapped is an outcome that is only the statement's error, prefixed.
func wrapped(prefix string) func(int64, error) error {
	return func(_ int64, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", prefix, permission(err))
		}
		return nil
	}
}

// batchSender is what sends a pipeline: a pgx.Tx, in its transaction.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// send sends the statements and reads their outcomes in order: the first
// failure is the error (the server skipped the statements after a failed
// one; a transaction must roll back).
func (p *pipeline) send(ctx context.Context, tx batchSender) error {
	if len(p.read) == 0 {
		return nil
	}
	br := tx.SendBatch(ctx, &p.b)
	var err error
	for _, read := range p.read {
		if err = read(br); err != nil {
			break
		}
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("pgstore: write plan: %w", permission(cerr))
	}
	return err
}
