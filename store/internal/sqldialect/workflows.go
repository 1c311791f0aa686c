package sqldialect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// This file is store.Workflows (Procedures' methods) and the statements
// of store.WorkflowTx, which each driver's Txs runs in its own
// transaction (the Workflow* functions). JSON columns (definition, input,
// result) are json (not jsonb: the bytes are kept exactly, and a result
// holding \u0000 is stored like a payload) on PostgreSQL and TEXT on
// SQLite, written as given: the statements pass them as text, NULL when
// empty.

var _ store.Workflows = (*Procedures)(nil)

const workflowCols = `name, version, plan_hash, definition, created_at`

func scanWorkflow(row Row) (*store.WorkflowDef, error) {
	var w store.WorkflowDef
	var def []byte
	if err := row.Scan(&w.Name, &w.Version, &w.PlanHash, &def, &w.CreatedAt); err != nil {
		return nil, err
	}
	w.Definition = json.RawMessage(def)
	return &w, nil
}

// jsonArg is a JSON column's parameter: its text, or NULL when empty.
func jsonArg(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}

// textArg is a nullable text column's parameter: NULL when empty.
func textArg(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// rawJSON is a scanned JSON column (nil when NULL).
func rawJSON(b []byte) json.RawMessage {
	if b == nil {
		return nil
	}
	return json.RawMessage(b)
}

// putWorkflowAttempts bounds the retries of a registration that lost the
// next version to a concurrent one (each attempt reads the latest again).
const putWorkflowAttempts = 16

// PutWorkflow implements store.Workflows. The new version's CreatedAt is
// d.CreatedAt when set (the engine's clock), else the current time.
func (p *Procedures) PutWorkflow(ctx context.Context, d store.WorkflowDef, audit func(store.WorkflowDef, bool) bt.Event) (store.WorkflowDef, bool, error) {
	dl := p.dialect
	switch {
	case d.Name == "":
		return store.WorkflowDef{}, false, fmt.Errorf("%s: put workflow: no name", dl.Prefix)
	case d.PlanHash == "":
		return store.WorkflowDef{}, false, fmt.Errorf("%s: put workflow %q: no plan hash", dl.Prefix, d.Name)
	case len(d.Definition) == 0:
		return store.WorkflowDef{}, false, fmt.Errorf("%s: put workflow %q: no definition", dl.Prefix, d.Name)
	}
	if d.CreatedAt.IsZero() {
		d.CreatedAt = time.Now()
	}
	d.CreatedAt = d.CreatedAt.UTC().Truncate(time.Microsecond)
	for attempt := 1; ; attempt++ {
		out, created, err := p.putWorkflow(ctx, d, audit)
		if err != nil && dl.IsUnique(err) && attempt < putWorkflowAttempts {
			continue // a concurrent registration took that version: read the latest again
		}
		if err != nil {
			return store.WorkflowDef{}, false, fmt.Errorf("%s: put workflow %q: %w", dl.Prefix, d.Name, dl.Err(err))
		}
		return out, created, nil
	}
}

func (p *Procedures) putWorkflow(ctx context.Context, d store.WorkflowDef, audit func(store.WorkflowDef, bool) bt.Event) (out store.WorkflowDef, created bool, err error) {
	err = InTx(ctx, p.writer, func(tx Tx) error {
		latest, err := scanWorkflow(tx.QueryRow(ctx, `SELECT `+workflowCols+` FROM backstop_workflows
			WHERE name = $1 ORDER BY version DESC LIMIT 1`, d.Name))
		switch {
		case errors.Is(err, ErrNoRows):
			d.Version = 1
		case err != nil:
			return err
		case latest.PlanHash == d.PlanHash:
			out = *latest
			return p.auditWorkflow(ctx, tx, audit, out, false)
		default:
			d.Version = latest.Version + 1
		}
		if _, err := tx.Exec(ctx, `INSERT INTO backstop_workflows (`+workflowCols+`) VALUES ($1, $2, $3, $4, $5)`,
			d.Name, d.Version, d.PlanHash, jsonArg(d.Definition), d.CreatedAt); err != nil {
			return err
		}
		out, created = d, true
		return p.auditWorkflow(ctx, tx, audit, out, true)
	})
	return out, created, err
}

// auditWorkflow appends the event audit makes of a registration (nil: none).
func (p *Procedures) auditWorkflow(ctx context.Context, tx Tx, audit func(store.WorkflowDef, bool) bt.Event, d store.WorkflowDef, created bool) error {
	if audit == nil {
		return nil
	}
	return p.appendAudit(ctx, tx, audit(d, created))
}

// GetWorkflow implements store.Workflows.
func (p *Procedures) GetWorkflow(ctx context.Context, name string, version int) (*store.WorkflowDef, error) {
	d, q := p.dialect, p.reader
	var row Row
	if version == 0 {
		row = q.QueryRow(ctx, `SELECT `+workflowCols+` FROM backstop_workflows WHERE name = $1 ORDER BY version DESC LIMIT 1`, name)
	} else {
		row = q.QueryRow(ctx, `SELECT `+workflowCols+` FROM backstop_workflows WHERE name = $1 AND version = $2`, name, version)
	}
	w, err := scanWorkflow(row)
	if errors.Is(err, ErrNoRows) {
		if version == 0 {
			return nil, fmt.Errorf("workflow %q: %w", name, store.ErrNotFound)
		}
		return nil, fmt.Errorf("workflow %q version %d: %w", name, version, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: get workflow: %w", d.Prefix, d.Err(err))
	}
	return w, nil
}

// WorkflowByHash implements store.Workflows. Should two versions carry
// the hash (a definition registered again after another one), the latest
// is returned: their definitions are the same.
func (p *Procedures) WorkflowByHash(ctx context.Context, hash string) (*store.WorkflowDef, error) {
	d, q := p.dialect, p.reader
	w, err := scanWorkflow(q.QueryRow(ctx, `SELECT `+workflowCols+` FROM backstop_workflows
		WHERE plan_hash = $1 ORDER BY version DESC, name LIMIT 1`, hash))
	if errors.Is(err, ErrNoRows) {
		return nil, fmt.Errorf("workflow with plan hash %q: %w", hash, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: workflow by hash: %w", d.Prefix, d.Err(err))
	}
	return w, nil
}

// ListWorkflows implements store.Workflows.
func (p *Procedures) ListWorkflows(ctx context.Context) ([]store.WorkflowDef, error) {
	d, q := p.dialect, p.reader
	rows, err := q.Query(ctx, `SELECT `+workflowCols+` FROM backstop_workflows w
		WHERE version = (SELECT max(version) FROM backstop_workflows l WHERE l.name = w.name) ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("%s: list workflows: %w", d.Prefix, d.Err(err))
	}
	defer rows.Close()
	out := []store.WorkflowDef{}
	for rows.Next() {
		w, err := scanWorkflow(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: list workflows: %w", d.Prefix, err)
		}
		out = append(out, *w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: list workflows: %w", d.Prefix, err)
	}
	return out, nil
}

const runCols = `run_id, workflow, version, plan_hash, state, input, error, seq, created_at, updated_at, finished_at`

// runDest is a run row being scanned.
type runDest struct {
	r     store.RunRecord
	state string
	input []byte
}

func (d *runDest) dest() []any {
	return []any{&d.r.RunID, &d.r.Workflow, &d.r.Version, &d.r.PlanHash, &d.state, &d.input, &d.r.Error, &d.r.Seq,
		&d.r.CreatedAt, &d.r.UpdatedAt, &d.r.FinishedAt}
}

func (d *runDest) run() *store.RunRecord {
	r := d.r
	r.State = store.RunState(d.state)
	r.Input = rawJSON(d.input)
	return &r
}

const stepCols = `run_id, step_id, item, task_id, state, result, error, compensation_of, completed_seq, updated_at`

func scanStep(row Row) (store.StepRecord, error) {
	var s store.StepRecord
	var taskID *string
	var state string
	var result []byte
	if err := row.Scan(&s.RunID, &s.StepID, &s.Item, &taskID, &state, &result, &s.Error, &s.CompensationOf,
		&s.CompletedSeq, &s.UpdatedAt); err != nil {
		return s, err
	}
	if taskID != nil {
		s.TaskID = *taskID
	}
	s.State = store.StepState(state)
	s.Result = rawJSON(result)
	return s, nil
}

func scanSteps(rows Rows) ([]store.StepRecord, error) {
	defer rows.Close()
	out := []store.StepRecord{}
	for rows.Next() {
		s, err := scanStep(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// GetRun implements store.Workflows: the run and its steps in one
// statement, so that they are read at one moment, the run's columns (its
// input) once: the run's row comes first, then one row per step, the
// columns they share (id, state, JSON, error, sequence, updated_at) in the
// same places.
func (p *Procedures) GetRun(ctx context.Context, runID string) (*store.RunRecord, []store.StepRecord, error) {
	d, q := p.dialect, p.reader
	rows, err := q.Query(ctx, `
		SELECT 0, run_id, state, input, error, seq, updated_at, workflow, version, plan_hash, NULL, created_at, finished_at
		FROM backstop_runs WHERE run_id = $1
		UNION ALL
		SELECT 1, run_id, state, result, error, completed_seq, updated_at, step_id, item, task_id, compensation_of, NULL, NULL
		FROM backstop_run_steps WHERE run_id = $1
		ORDER BY 1, 8, 9`, runID)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: get run: %w", d.Prefix, d.Err(err))
	}
	defer rows.Close()
	var run *store.RunRecord
	steps := []store.StepRecord{}
	for rows.Next() {
		var (
			part, number       int
			id, state, errText string
			raw                []byte
			seq                int64
			updated            time.Time
			name               string
			text, comp         *string
			created, finished  *time.Time
		)
		if err := rows.Scan(&part, &id, &state, &raw, &errText, &seq, &updated, &name, &number, &text, &comp,
			&created, &finished); err != nil {
			return nil, nil, fmt.Errorf("%s: get run: %w", d.Prefix, err)
		}
		if part == 0 {
			run = &store.RunRecord{RunID: id, Workflow: name, Version: number, State: store.RunState(state),
				Input: rawJSON(raw), Error: errText, Seq: seq, UpdatedAt: updated, FinishedAt: finished}
			if text != nil {
				run.PlanHash = *text
			}
			if created != nil {
				run.CreatedAt = *created
			}
			continue
		}
		st := store.StepRecord{RunID: id, StepID: name, Item: number, State: store.StepState(state),
			Result: rawJSON(raw), Error: errText, CompletedSeq: seq, UpdatedAt: updated}
		if text != nil {
			st.TaskID = *text
		}
		if comp != nil {
			st.CompensationOf = *comp
		}
		steps = append(steps, st)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("%s: get run: %w", d.Prefix, err)
	}
	if run == nil {
		return nil, nil, fmt.Errorf("run %q: %w", runID, store.ErrNotFound)
	}
	return run, steps, nil
}

// defaultRunLimit is RunFilter.Limit's default.
const defaultRunLimit = 100

// ListRuns implements store.Workflows.
func (p *Procedures) ListRuns(ctx context.Context, f store.RunFilter) ([]store.RunRecord, error) {
	d, q := p.dialect, p.reader
	var a args
	var b strings.Builder
	b.WriteString(`SELECT ` + runCols + ` FROM backstop_runs WHERE true`)
	if f.Workflow != "" {
		b.WriteString(` AND workflow = ` + a.add(f.Workflow))
	}
	if len(f.States) > 0 {
		states := make([]string, len(f.States))
		for i, s := range f.States {
			states[i] = string(s)
		}
		b.WriteString(` AND state ` + d.InText(a.add(d.TextList(states))))
	}
	if f.BeforeID != "" {
		b.WriteString(` AND run_id < ` + a.add(f.BeforeID))
	}
	limit := f.Limit
	if limit <= 0 {
		limit = defaultRunLimit
	}
	b.WriteString(` ORDER BY run_id DESC LIMIT ` + a.add(limit))
	rows, err := q.Query(ctx, b.String(), a...)
	if err != nil {
		return nil, fmt.Errorf("%s: list runs: %w", d.Prefix, d.Err(err))
	}
	defer rows.Close()
	out := []store.RunRecord{}
	for rows.Next() {
		var rd runDest
		if err := rows.Scan(rd.dest()...); err != nil {
			return nil, fmt.Errorf("%s: list runs: %w", d.Prefix, err)
		}
		out = append(out, *rd.run())
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: list runs: %w", d.Prefix, err)
	}
	return out, nil
}

// DeleteFinishedRuns implements store.Workflows.
func (p *Procedures) DeleteFinishedRuns(ctx context.Context, states, stopped []store.RunState, before time.Time, limit int) (int, error) {
	d := p.dialect
	if len(states)+len(stopped) == 0 || limit <= 0 {
		return 0, nil
	}
	names := func(ss []store.RunState) any {
		out := make([]string, len(ss))
		for i, st := range ss {
			out[i] = string(st)
		}
		return d.TextList(out)
	}
	lock := d.ForUpdate
	if lock != "" {
		lock += " SKIP LOCKED"
	}
	n := 0
	err := InTx(ctx, p.writer, func(tx Tx) error {
		// A stopped run goes once nothing of it is open: no step task
		// still to settle, none an open dead letter.
		rows, err := tx.Query(ctx, `SELECT r.run_id FROM backstop_runs r WHERE r.finished_at < $1 AND (r.state `+d.InText("$2")+`
			OR (r.state `+d.InText("$4")+` AND NOT EXISTS (SELECT 1 FROM backstop_run_steps s JOIN backstop_tasks t ON t.id = s.task_id
				WHERE s.run_id = r.run_id AND (t.state NOT IN ('succeeded', 'canceled', 'dead') OR (t.state = 'dead' AND t.dlq_status = 'open')))))
			ORDER BY r.finished_at LIMIT $3`+lock, before, names(states), limit, names(stopped))
		if err != nil {
			return err
		}
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(ids) == 0 {
			return err
		}
		list := d.TextList(ids)
		if _, err := tx.Exec(ctx, `DELETE FROM backstop_run_steps WHERE run_id `+d.InText("$1"), list); err != nil {
			return err
		}
		k, err := tx.Exec(ctx, `DELETE FROM backstop_runs WHERE run_id `+d.InText("$1"), list)
		n = int(k)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("%s: delete finished runs: %w", d.Prefix, d.Err(err))
	}
	return n, nil
}

// WorkflowSetRunWake is store.WorkflowTx's SetRunWake in q.
func WorkflowSetRunWake(ctx context.Context, d *Dialect, q Querier, runID string, at time.Time) error {
	var err error
	if at.IsZero() {
		_, err = q.Exec(ctx, `DELETE FROM backstop_run_wakeups WHERE run_id = $1`, runID)
	} else {
		_, err = q.Exec(ctx, `INSERT INTO backstop_run_wakeups (run_id, wake_at) VALUES ($1, $2)
			ON CONFLICT (run_id) DO UPDATE SET wake_at = excluded.wake_at`, runID, at.UTC().Truncate(time.Microsecond))
	}
	if err != nil {
		return fmt.Errorf("%s: set the wake-up of run %s: %w", d.Prefix, runID, d.Err(err))
	}
	return nil
}

// RunsToWake implements store.Workflows: the runs whose wake-up time came,
// earliest first.
func (p *Procedures) RunsToWake(ctx context.Context, now time.Time, limit int) ([]string, error) {
	d, q := p.dialect, p.reader
	rows, err := q.Query(ctx, `SELECT run_id FROM backstop_run_wakeups WHERE wake_at <= $1 ORDER BY wake_at, run_id LIMIT $2`, now, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: runs to wake: %w", d.Prefix, d.Err(err))
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("%s: runs to wake: %w", d.Prefix, err)
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// StepsOfTasks implements store.Workflows.
func (p *Procedures) StepsOfTasks(ctx context.Context, taskIDs []string) ([]store.StepRecord, error) {
	return WorkflowStepsOfTasks(ctx, p.dialect, p.reader, taskIDs)
}

// RunInputsOfTasks implements store.Workflows: the step rows of the tasks,
// then the inputs of their runs (once per run).
func (p *Procedures) RunInputsOfTasks(ctx context.Context, taskIDs []string) (map[string]json.RawMessage, error) {
	d, q := p.dialect, p.reader
	out := map[string]json.RawMessage{}
	if len(taskIDs) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `SELECT task_id, run_id FROM backstop_run_steps WHERE task_id `+d.InText("$1"), d.TextList(taskIDs))
	if err != nil {
		return nil, fmt.Errorf("%s: run inputs of tasks: %w", d.Prefix, d.Err(err))
	}
	byRun := map[string][]string{}
	for rows.Next() {
		var task, run string
		if err := rows.Scan(&task, &run); err != nil {
			rows.Close()
			return nil, fmt.Errorf("%s: run inputs of tasks: %w", d.Prefix, err)
		}
		byRun[run] = append(byRun[run], task)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: run inputs of tasks: %w", d.Prefix, d.Err(err))
	}
	if len(byRun) == 0 {
		return out, nil
	}
	runs := make([]string, 0, len(byRun))
	for r := range byRun {
		runs = append(runs, r)
	}
	rows, err = q.Query(ctx, `SELECT run_id, input FROM backstop_runs WHERE run_id `+d.InText("$1"), d.TextList(runs))
	if err != nil {
		return nil, fmt.Errorf("%s: run inputs of tasks: %w", d.Prefix, d.Err(err))
	}
	defer rows.Close()
	for rows.Next() {
		var (
			run string
			raw []byte
		)
		if err := rows.Scan(&run, &raw); err != nil {
			return nil, fmt.Errorf("%s: run inputs of tasks: %w", d.Prefix, err)
		}
		in := rawJSON(raw)
		for _, task := range byRun[run] {
			out[task] = in
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: run inputs of tasks: %w", d.Prefix, d.Err(err))
	}
	return out, nil
}

// WorkflowInsertRun is store.WorkflowTx's InsertRun in q (a transaction).
// It leaves the transaction usable when the run exists (ON CONFLICT DO
// NOTHING), though the Tx handle then only rolls back.
func WorkflowInsertRun(ctx context.Context, d *Dialect, q Querier, r store.RunRecord) error {
	sql, a, err := WorkflowInsertRunSQL(d, r, false)
	if err != nil {
		return err
	}
	n, err := q.Exec(ctx, sql, a...)
	return WorkflowInsertRunResult(d, r, n, err)
}

// WorkflowInsertRunSQL is the statement of WorkflowInsertRun, for a driver
// that sends it with others (WorkflowInsertRunResult reads its outcome).
// strict: a run id that exists fails the statement (a unique violation)
// instead of inserting nothing.
func WorkflowInsertRunSQL(d *Dialect, r store.RunRecord, strict bool) (string, []any, error) {
	if r.RunID == "" {
		return "", nil, fmt.Errorf("%s: insert run: no run id", d.Prefix)
	}
	conflict := " ON CONFLICT (run_id) DO NOTHING"
	if strict {
		conflict = ""
	}
	hash := "$4"
	if r.Latest {
		// A plan hash of NULL fails the NOT NULL column: the statement (and
		// the pipeline's transaction) fails when a later version
		// is registered, instead of inserting a run of a stale one.
		hash = "CASE WHEN $3 = (SELECT max(version) FROM backstop_workflows WHERE name = $2) THEN $4 END"
	}
	return `INSERT INTO backstop_runs (` + runCols + `)
		VALUES ($1, $2, $3, ` + hash + `, $5, $6, $7, $8, $9, $10, $11)` + conflict,
		[]any{r.RunID, r.Workflow, r.Version, r.PlanHash, string(r.State), jsonArg(r.Input), r.Error, r.Seq,
			r.CreatedAt, r.UpdatedAt, r.FinishedAt}, nil
}

// WorkflowInsertRunResult is WorkflowInsertRun's outcome from its
// statement's: n rows inserted, or err. A run id that exists:
// store.ErrConflict.
func WorkflowInsertRunResult(d *Dialect, r store.RunRecord, n int64, err error) error {
	if err != nil && d.IsUnique(err) {
		return &store.RunExistsError{RunID: r.RunID}
	}
	if err != nil && r.Latest && staleVersion(err) {
		return fmt.Errorf("%s: insert run %s: workflow %q version %d: %w", d.Prefix, r.RunID, r.Workflow, r.Version, store.ErrStaleVersion)
	}
	if err != nil {
		return fmt.Errorf("%s: insert run %s: %w", d.Prefix, r.RunID, d.Err(err))
	}
	if n == 0 {
		return &store.RunExistsError{RunID: r.RunID}
	}
	return nil
}

// staleVersion: err is the NOT NULL violation of backstop_runs.plan_hash
// that a Latest insert's statement raises when its version is not the
// latest (the only NULL that statement can write there). PostgreSQL: null
// value in column "plan_hash" …; SQLite: NOT NULL constraint failed:
// backstop_runs.plan_hash.
func staleVersion(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "null") && strings.Contains(msg, "plan_hash")
}

// WorkflowLockRun is store.WorkflowTx's LockRun in q (a transaction): the
// run's row is locked (d.ForUpdate) before its steps are read, so that they
// are read as the previous holder of the lock committed them.
func WorkflowLockRun(ctx context.Context, d *Dialect, q Querier, runID string) (*store.RunRecord, []store.StepRecord, error) {
	var rd runDest
	err := q.QueryRow(ctx, `SELECT `+runCols+` FROM backstop_runs WHERE run_id = $1`+d.ForUpdate, runID).Scan(rd.dest()...)
	if errors.Is(err, ErrNoRows) {
		return nil, nil, fmt.Errorf("run %q: %w", runID, store.ErrNotFound)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: lock run: %w", d.Prefix, d.Err(err))
	}
	rows, err := q.Query(ctx, `SELECT `+stepCols+` FROM backstop_run_steps WHERE run_id = $1 ORDER BY step_id, item`, runID)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: lock run: %w", d.Prefix, d.Err(err))
	}
	steps, err := scanSteps(rows)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: lock run: %w", d.Prefix, err)
	}
	return rd.run(), steps, nil
}

// WorkflowLockRuns is store.WorkflowTx's LockRuns in q (a transaction): the
// runs' rows are locked in run id order (PostgreSQL locks the rows of
// SELECT … ORDER BY … FOR UPDATE as they come out of the sort) before
// their steps are read.
func WorkflowLockRuns(ctx context.Context, d *Dialect, q Querier, runIDs []string) ([]store.LockedRun, error) {
	if len(runIDs) == 0 {
		return []store.LockedRun{}, nil
	}
	runsSQL, stepsSQL := WorkflowLockRunsSQL(d)
	list := d.TextList(runIDs)
	rows, err := q.Query(ctx, runsSQL, list)
	if err != nil {
		return nil, fmt.Errorf("%s: lock runs: %w", d.Prefix, d.Err(err))
	}
	out, err := ScanLockedRuns(d, rows)
	if err != nil || len(out) == 0 {
		return out, err
	}
	srows, err := q.Query(ctx, stepsSQL, list)
	if err != nil {
		return nil, fmt.Errorf("%s: lock runs: %w", d.Prefix, d.Err(err))
	}
	return AddLockedSteps(d, out, srows)
}

// WorkflowLockRunsSQL are LockRuns' two statements, each of one parameter
// (d.TextList of the run ids): the runs, locked in run id order, then
// their steps. The steps are a statement of their own so that they are
// read as they are once the locks are held (under READ COMMITTED each
// statement reads its own snapshot); a driver may pipeline the two.
func WorkflowLockRunsSQL(d *Dialect) (runs, steps string) {
	return `SELECT ` + runCols + ` FROM backstop_runs WHERE run_id ` + d.InText("$1") + ` ORDER BY run_id` + d.ForUpdate,
		`SELECT ` + stepCols + ` FROM backstop_run_steps WHERE run_id ` + d.InText("$1") + ` ORDER BY run_id, step_id, item`
}

// WorkflowLockRunsKeyedSQL are PostgreSQL's LockRuns statements
// (WorkflowLockRunsSQL's, the same rows in the same order; $1 a text[] of
// distinct run ids): the ids joined from the array, with a condition true
// of every element (its ordinality between 1 and the array's length) that
// makes the planner expect one, so that a prepared statement's generic
// plan finds the runs and their steps by the primary keys whatever the
// tables' sizes and statistics. With run_id = ANY($1) the generic plan,
// made while the tables were small and without statistics, scanned them
// whole, and a connection kept that plan as they grew: on a store keeping
// a few thousand runs, reading a settle batch's step rows cost 1.5 ms (18
// ms at the most) and more with every run kept (docs/benchmarks.md,
// branch wfstep6; the success settle's batchOfOne, branch settleplan,
// is the same device).
func WorkflowLockRunsKeyedSQL() (runs, steps string) {
	const keyed = ` FROM unnest($1::text[]) WITH ORDINALITY AS i(id, idx) JOIN %s ON run_id = i.id
		WHERE i.idx BETWEEN 1 AND cardinality($1::text[]) ORDER BY `
	return `SELECT ` + runCols + fmt.Sprintf(keyed, "backstop_runs") + `run_id FOR UPDATE OF backstop_runs`,
		`SELECT ` + stepCols + fmt.Sprintf(keyed, "backstop_run_steps") + `run_id, step_id, item`
}

// ScanLockedRuns reads the runs of LockRuns' first statement (rows is
// closed), each with no steps yet.
func ScanLockedRuns(d *Dialect, rows Rows) ([]store.LockedRun, error) {
	defer rows.Close()
	out := []store.LockedRun{}
	for rows.Next() {
		var rd runDest
		if err := rows.Scan(rd.dest()...); err != nil {
			return nil, fmt.Errorf("%s: lock runs: %w", d.Prefix, err)
		}
		out = append(out, store.LockedRun{Run: *rd.run(), Steps: []store.StepRecord{}})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: lock runs: %w", d.Prefix, d.Err(err))
	}
	return out, nil
}

// AddLockedSteps adds the step rows of LockRuns' second statement to
// their runs in out (rows is closed).
func AddLockedSteps(d *Dialect, out []store.LockedRun, rows Rows) ([]store.LockedRun, error) {
	steps, err := scanSteps(rows)
	if err != nil {
		return nil, fmt.Errorf("%s: lock runs: %w", d.Prefix, d.Err(err))
	}
	at := make(map[string]int, len(out))
	for i, l := range out {
		at[l.Run.RunID] = i
	}
	for _, s := range steps {
		if i, ok := at[s.RunID]; ok {
			out[i].Steps = append(out[i].Steps, s)
		}
	}
	return out, nil
}

// WorkflowUpdateRun is store.WorkflowTx's UpdateRun in q. An unknown run:
// store.ErrNotFound.
func WorkflowUpdateRun(ctx context.Context, d *Dialect, q Querier, r store.RunRecord) error {
	n, err := q.Exec(ctx, `UPDATE backstop_runs SET state = $2, error = $3, seq = $4, updated_at = $5, finished_at = $6
		WHERE run_id = $1`, r.RunID, string(r.State), r.Error, r.Seq, r.UpdatedAt, r.FinishedAt)
	if err != nil {
		return fmt.Errorf("%s: update run %s: %w", d.Prefix, r.RunID, d.Err(err))
	}
	if n == 0 {
		return fmt.Errorf("run %q: %w", r.RunID, store.ErrNotFound)
	}
	return nil
}

// putStepsChunk bounds the rows of one INSERT (10 parameters each; SQLite
// allows 32766).
const putStepsChunk = 500

// WorkflowPutSteps is store.WorkflowTx's PutSteps in q: one upsert per
// chunk of rows. Of rows with the same key the last is written. A task id
// another row already holds: store.ErrConflict.
func WorkflowPutSteps(ctx context.Context, d *Dialect, q Querier, steps []store.StepRecord) error {
	stmts, err := WorkflowPutStepsSQL(d, steps, putStepsChunk)
	if err != nil {
		return err
	}
	for _, st := range stmts {
		if _, err := q.Exec(ctx, st.SQL, st.Args...); err != nil {
			return WorkflowPutStepsErr(d, err)
		}
	}
	return nil
}

// Statement is one statement's text and arguments.
type Statement struct {
	SQL  string
	Args []any
}

// WorkflowPutStepsSQL is the statements of WorkflowPutSteps, at most chunk
// rows each, for a driver that sends them with others
// (WorkflowPutStepsErr names their failure).
func WorkflowPutStepsSQL(d *Dialect, steps []store.StepRecord, chunk int) ([]Statement, error) {
	rows, err := lastSteps(d, steps)
	if err != nil {
		return nil, err
	}
	var out []Statement
	for len(rows) > 0 {
		n := min(len(rows), chunk)
		var a args
		var b strings.Builder
		b.WriteString(`INSERT INTO backstop_run_steps (` + stepCols + `) VALUES `)
		for i, s := range rows[:n] {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", a.add(s.RunID), a.add(s.StepID), a.add(s.Item),
				a.add(textArg(s.TaskID)), a.add(string(s.State)), a.add(jsonArg(s.Result)), a.add(s.Error),
				a.add(s.CompensationOf), a.add(s.CompletedSeq), a.add(s.UpdatedAt))
		}
		b.WriteString(` ON CONFLICT (run_id, step_id, item) DO UPDATE SET task_id = excluded.task_id,
			state = excluded.state, result = excluded.result, error = excluded.error,
			compensation_of = excluded.compensation_of, completed_seq = excluded.completed_seq,
			updated_at = excluded.updated_at`)
		out = append(out, Statement{SQL: b.String(), Args: a})
		rows = rows[n:]
	}
	return out, nil
}

// lastSteps are the rows of steps to write, in their order: of rows with
// the same key the last. A row without a run or step id is an error.
func lastSteps(d *Dialect, steps []store.StepRecord) ([]store.StepRecord, error) {
	type key struct {
		run, step string
		item      int
	}
	last := make(map[key]int, len(steps))
	for i, s := range steps {
		if s.RunID == "" || s.StepID == "" {
			return nil, fmt.Errorf("%s: put steps: row %d has no run or step id", d.Prefix, i)
		}
		last[key{s.RunID, s.StepID, s.Item}] = i
	}
	rows := make([]store.StepRecord, 0, len(last))
	for i, s := range steps {
		if last[key{s.RunID, s.StepID, s.Item}] == i {
			rows = append(rows, s)
		}
	}
	return rows, nil
}

// WorkflowPutStepsArraysSQL is PostgreSQL's WorkflowPutSteps as one
// statement of arrays (one column an array): one prepared statement for
// any number of rows, as a pipeline wants (the VALUES form takes a
// statement per chunk of rows). Nil when there are no rows.
func WorkflowPutStepsArraysSQL(d *Dialect, steps []store.StepRecord) (*Statement, error) {
	rows, err := lastSteps(d, steps)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	n := len(rows)
	runs, ids, items, tasks := make([]string, n), make([]string, n), make([]int32, n), make([]*string, n)
	states, results, errs, comps := make([]string, n), make([]*string, n), make([]string, n), make([]string, n)
	seqs, updated := make([]int64, n), make([]time.Time, n)
	for i, s := range rows {
		runs[i], ids[i], items[i], states[i], errs[i], comps[i] = s.RunID, s.StepID, int32(s.Item), string(s.State), s.Error, s.CompensationOf
		seqs[i], updated[i] = s.CompletedSeq, s.UpdatedAt
		if s.TaskID != "" {
			tasks[i] = &rows[i].TaskID
		}
		if len(s.Result) > 0 {
			r := string(s.Result)
			results[i] = &r
		}
	}
	return &Statement{SQL: `INSERT INTO backstop_run_steps (` + stepCols + `)
		SELECT run_id, step_id, item, task_id, state, result::json, error, compensation_of, completed_seq, updated_at
		FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
			$9::bigint[], $10::timestamptz[])
			AS v(run_id, step_id, item, task_id, state, result, error, compensation_of, completed_seq, updated_at)
		ON CONFLICT (run_id, step_id, item) DO UPDATE SET task_id = excluded.task_id,
			state = excluded.state, result = excluded.result, error = excluded.error,
			compensation_of = excluded.compensation_of, completed_seq = excluded.completed_seq,
			updated_at = excluded.updated_at`,
		Args: []any{runs, ids, items, tasks, states, results, errs, comps, seqs, updated}}, nil
}

// WorkflowPutStepsErr is the error of a failed WorkflowPutSteps statement:
// a task id another row already holds is store.ErrConflict.
func WorkflowPutStepsErr(d *Dialect, err error) error {
	if d.IsUnique(err) {
		return fmt.Errorf("%w: put steps: a task id is already another step's: %v", store.ErrConflict, err)
	}
	return fmt.Errorf("%s: put steps: %w", d.Prefix, d.Err(err))
}

// TaskStates is store.WorkflowTx's TaskStates in q.
func TaskStates(ctx context.Context, d *Dialect, q Querier, taskIDs []string) (map[string]bt.State, error) {
	out := make(map[string]bt.State, len(taskIDs))
	if len(taskIDs) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `SELECT id, state FROM backstop_tasks WHERE id `+d.InText("$1"), d.TextList(taskIDs))
	if err != nil {
		return nil, fmt.Errorf("%s: task states: %w", d.Prefix, d.Err(err))
	}
	defer rows.Close()
	for rows.Next() {
		var id, state string
		if err := rows.Scan(&id, &state); err != nil {
			return nil, fmt.Errorf("%s: task states: %w", d.Prefix, d.Err(err))
		}
		out[id] = bt.State(state)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: task states: %w", d.Prefix, d.Err(err))
	}
	return out, nil
}

// WorkflowStepsOfTasks is store.WorkflowTx's StepsOfTasks in q (and
// store.Workflows' on the reader).
func WorkflowStepsOfTasks(ctx context.Context, d *Dialect, q Querier, taskIDs []string) ([]store.StepRecord, error) {
	if len(taskIDs) == 0 {
		return []store.StepRecord{}, nil
	}
	rows, err := q.Query(ctx, `SELECT `+stepCols+` FROM backstop_run_steps WHERE task_id `+d.InText("$1"), d.TextList(taskIDs))
	if err != nil {
		return nil, fmt.Errorf("%s: steps of tasks: %w", d.Prefix, d.Err(err))
	}
	steps, err := scanSteps(rows)
	if err != nil {
		return nil, fmt.Errorf("%s: steps of tasks: %w", d.Prefix, err)
	}
	return steps, nil
}
