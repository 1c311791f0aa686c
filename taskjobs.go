package backstop

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/store"
)

// TaskAction is an operator's action on live tasks, run as a bulk job on
// the redrive machinery (redrives.go: runJob): the same record, cursor, runner,
// resume, cancel and per-item outcomes.
type TaskAction = string

// Task actions.
const (
	// TaskCancel cancels waiting tasks (scheduled, pending, buffered) and
	// asks running ones to stop (OutcomeCancelRequested).
	TaskCancel TaskAction = store.JobTaskCancel
	// TaskRunNow makes scheduled tasks (retrying ones included) claimable
	// now: pending, run_at now.
	TaskRunNow TaskAction = store.JobTaskRunNow
	// TaskDelete deletes scheduled and pending tasks (not workflow steps
	// nor ordered tasks: cancel those), with a reason; their history stays,
	// task.deleted last.
	TaskDelete TaskAction = store.JobTaskDelete
	// TaskReprioritize sets the priority of waiting tasks.
	TaskReprioritize TaskAction = store.JobTaskReprioritize
)

// TaskActions are the actions, by their API names.
var TaskActions = []TaskAction{TaskCancel, TaskRunNow, TaskDelete, TaskReprioritize}

// Task action outcomes (RedriveItem.Outcome of a task job; a task canceled
// is OutcomeCanceled, "canceled").
const (
	OutcomeCancelRequested = store.OutcomeCancelRequested
	OutcomeRunNow          = store.OutcomeRunNow
	OutcomeDeleted         = store.OutcomeDeleted
	OutcomeReprioritized   = store.OutcomeReprioritized
	OutcomeSkipped         = store.OutcomeSkipped
)

// MaxTaskJobIDs bounds the tasks a job picks by id.
const MaxTaskJobIDs = 1000

// TaskJobParams selects live tasks and says what to do to them.
type TaskJobParams struct {
	Action TaskAction
	// IDs picks these tasks (at most MaxTaskJobIDs); or Filter selects
	// them: States (default, and at most, the states the action changes:
	// ActionStates), Queue, Kind, Attrs, CreatedSince, CreatedUntil, Where.
	// Not both.
	IDs    []string
	Filter ListParams
	// Priority: TaskReprioritize's new priority (required; -32768 to
	// 32767); no other action takes one.
	Priority *int
	// Reason is recorded with the actor in each task's event (required by
	// TaskDelete, and by every action with Config.RequireReason). Actor:
	// who acts; default the context's (WithActor), else "library".
	Reason, Actor string
	// All: the filter selects nothing and every task the action can change
	// is meant. Without it an empty selection is refused, naming "all"; a
	// dry run needs none.
	All bool
	// DryRun changes nothing (no record, no event): Preview counts what
	// matches now and shows SampleSize of them (0: DefaultRedriveSample;
	// negative: none).
	DryRun     bool
	SampleSize int
	// Rate (per second, 0: unthrottled), Limit (at most this many in this
	// run; the same job again continues), BatchSize (per transaction,
	// default 500), Force (take over a job whose runner was seen
	// recently): as for RedriveParams.
	Rate      float64
	Limit     int
	BatchSize int
	Force     bool
	runner    string
}

// ActionStates are the states each action changes (any other skips the
// task, its outcome saying why).
func ActionStates(a TaskAction) []State { return slices.Clone(store.ActionStates[a]) }

// taskJobKey identifies "the same task job" for resuming.
type taskJobKey struct {
	Action       TaskAction        `json:"action"`
	IDs          []string          `json:"ids,omitempty"`
	States       []State           `json:"states,omitempty"`
	Queue        string            `json:"queue,omitempty"`
	Kind         string            `json:"kind,omitempty"`
	Attrs        map[string]string `json:"attrs,omitempty"`
	CreatedSince *time.Time        `json:"since,omitempty"`
	CreatedUntil *time.Time        `json:"until,omitempty"`
	Where        string            `json:"where,omitempty"`
	Priority     *int              `json:"priority,omitempty"`
}

// taskSelection names the filters of f that narrow a task job (by their
// API names).
func taskSelection(f ListParams) []string {
	var sel selection // dlq.go
	add := sel.add
	add(len(f.States) > 0, "states")
	add(f.Queue != "", "queue")
	add(f.Kind != "", "kind")
	add(len(f.Attrs) > 0, "attributes")
	add(!f.CreatedSince.IsZero(), "since")
	add(!f.CreatedUntil.IsZero(), "until")
	add(f.Where != "", "where")
	return sel
}

// checkTaskJob checks p and returns the filter the job lists by (states
// narrowed to the action's) and its ids sorted; nothing is read on bad
// input.
func (c *Client) checkTaskJob(p *TaskJobParams) (ListParams, []string, error) {
	allowed, ok := store.ActionStates[p.Action]
	if !ok {
		return ListParams{}, nil, invalid("action", "unknown action %q (want one of %s)", p.Action, strings.Join(TaskActions, ", "))
	}
	switch {
	case p.Action == TaskReprioritize && p.Priority == nil:
		return ListParams{}, nil, invalid("priority", "is required to change the priority")
	case p.Action == TaskReprioritize && (*p.Priority < math.MinInt16 || *p.Priority > math.MaxInt16):
		return ListParams{}, nil, invalid("priority", "%d: must be between %d and %d", *p.Priority, math.MinInt16, math.MaxInt16)
	case p.Action != TaskReprioritize && p.Priority != nil:
		return ListParams{}, nil, invalid("priority", "only %s takes a priority", TaskReprioritize)
	case p.Action == TaskDelete && strings.TrimSpace(p.Reason) == "" && !p.DryRun:
		return ListParams{}, nil, invalid("reason", "is required to delete tasks: say why")
	case p.Rate < 0:
		return ListParams{}, nil, invalid("rate", "must not be negative")
	case p.Limit < 0:
		return ListParams{}, nil, invalid("limit", "must not be negative")
	}
	if err := c.checkReason("reason", p.Reason); err != nil {
		return ListParams{}, nil, err
	}
	if err := engine.CheckText("actor", p.Actor); err != nil {
		return ListParams{}, nil, err
	}
	f := p.Filter
	f.AfterID, f.Limit, f.Newest, f.WithoutPayload = "", 0, false, true
	sel := taskSelection(f)
	if len(p.IDs) > 0 {
		if len(sel) > 0 || p.All {
			return f, nil, invalid("ids", "pick tasks by id or select them by %s, not both", strings.Join(append(sel, "all"), ", "))
		}
		if len(p.IDs) > MaxTaskJobIDs {
			return f, nil, invalid("ids", "%d ids: at most %d (select by a filter instead)", len(p.IDs), MaxTaskJobIDs)
		}
		ids := slices.Clone(p.IDs)
		for _, id := range ids {
			if engine.ValidName(id) != nil {
				return f, nil, invalid("ids", "%q is not a task id", id)
			}
		}
		slices.Sort(ids)
		return f, slices.Compact(ids), nil
	}
	if err := checkListFilter(f); err != nil {
		return f, nil, err
	}
	for _, s := range f.States {
		if !slices.Contains(allowed, s) {
			return f, nil, invalid("states", "%s changes only %s tasks, not %s", p.Action, joinStates(allowed), s)
		}
	}
	switch {
	case p.All && len(sel) > 0:
		return f, nil, invalid("all", "\"all\": true selects every task %s can change; it cannot be narrowed by %s (drop one or the other)",
			p.Action, strings.Join(sel, ", "))
	case !p.All && len(sel) == 0 && !p.DryRun:
		return f, nil, invalid("all", "nothing is selected: send \"all\": true (the CLI's --all) to act on every task %s can change, "+
			"or select some with ids, states, queue, kind, attributes, since, until or where", p.Action)
	}
	if len(f.States) == 0 {
		f.States = allowed
	}
	return f, nil, nil
}

func joinStates(ss []State) string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// TaskJob applies an action to the live tasks picked by id or matching a
// filter, as a durable bulk job: recorded with a snapshot (only tasks
// created at or before it are selected), run in batches of one
// transaction each (every task's event and outcome committed with the
// record's cursor), reporting progress after each; stopped, it resumes
// from its cursor (the same job again, or ResumeRedrive with its id), and
// CancelRedrive stops it. Each task is judged by its state when its batch
// runs: one that started running since the dry run is cancel-requested
// (TaskCancel) or skipped, never changed behind its worker's back.
func (c *Client) TaskJob(ctx context.Context, p TaskJobParams, progress func(RedriveProgress)) (RedriveProgress, error) {
	f, ids, err := c.checkTaskJob(&p)
	if err != nil {
		return RedriveProgress{}, err
	}
	now := c.now()
	if p.DryRun {
		return c.taskJobDryRun(ctx, p, f, ids, now)
	}
	k := taskJobKey{Action: p.Action, IDs: ids, Queue: f.Queue, Kind: f.Kind, Attrs: f.Attrs,
		CreatedSince: timePtr(f.CreatedSince), CreatedUntil: timePtr(f.CreatedUntil), Where: f.Where, Priority: p.Priority}
	if ids == nil {
		k.States = f.States
	}
	key, err := json.Marshal(k)
	if err != nil {
		return RedriveProgress{}, err
	}
	recorded, err := json.Marshal(struct {
		taskJobKey
		OperatorReason string `json:"operator_reason,omitempty"`
	}{k, p.Reason})
	if err != nil {
		return RedriveProgress{}, err
	}
	rec, resumed, err := c.store.StartRedrive(ctx, store.Redrive{ID: uuid.Must(uuid.NewV7()).String(), Kind: p.Action,
		FilterKey: string(key), Filter: recorded, Snapshot: now, StartedAt: now})
	if err != nil {
		return RedriveProgress{}, fmt.Errorf("%s: %w", p.Action, err)
	}
	lf := taskJobList(f, rec.Snapshot)
	b := store.TaskActionBatch{Action: p.Action, Actor: cmp.Or(p.Actor, store.ActorFrom(ctx, "library")), Reason: p.Reason, JobID: rec.ID}
	if p.Priority != nil {
		b.Priority = *p.Priority
	}
	return c.runJob(ctx, jobRun{rec: rec, resumed: resumed, runner: cmp.Or(p.runner, newRunnerID()), force: p.Force,
		rate: p.Rate, limit: p.Limit, batchSize: p.BatchSize,
		count: func(ctx context.Context, after string) (int, error) {
			if ids != nil {
				return len(idsAfter(ids, after)), nil
			}
			return c.countTasks(ctx, lf, after)
		},
		batch: func(ctx context.Context, after string, n int) (changed, skipped int, last string, err error) {
			if ids != nil {
				b.IDs = idsAfter(ids, after)
				b.IDs = b.IDs[:min(n, len(b.IDs))]
			} else {
				page := lf
				page.AfterID, page.Limit = after, n
				ts, err := c.store.List(ctx, page)
				if err != nil {
					return 0, 0, "", fmt.Errorf("%s: %w", p.Action, err)
				}
				b.IDs = make([]string, len(ts))
				for i, t := range ts {
					b.IDs[i] = t.ID
				}
			}
			if len(b.IDs) == 0 {
				return 0, 0, "", nil
			}
			b.Now = c.now()
			res, err := c.store.ApplyTaskAction(ctx, b)
			if err != nil {
				return 0, 0, "", fmt.Errorf("%s: %w", p.Action, err)
			}
			for _, t := range res.Canceled {
				c.e.StepCanceled(ctx, t) // workflows.go: a waiting step's run learns of it
			}
			return res.Changed, res.Skipped, b.IDs[len(b.IDs)-1], nil
		}}, progress)
}

// taskJobList is the listing of the tasks a job selects: summaries,
// created at or before the snapshot.
func taskJobList(f ListParams, snapshot time.Time) ListParams {
	f.WithoutPayload, f.AfterID, f.Limit = true, "", 0
	if f.CreatedUntil.IsZero() || f.CreatedUntil.After(snapshot) {
		f.CreatedUntil = snapshot
	}
	return f
}

// idsAfter are the sorted ids past the cursor.
func idsAfter(ids []string, after string) []string {
	i, _ := slices.BinarySearch(ids, after)
	for i < len(ids) && ids[i] <= after {
		i++
	}
	return ids[i:]
}

// countTasks counts lf's tasks after the cursor, a page of summaries at a
// time (a where outside the SQL subset is evaluated by the listing).
func (c *Client) countTasks(ctx context.Context, lf ListParams, after string) (int, error) {
	const page = 5000
	lf.AfterID, lf.Limit = after, page
	n := 0
	for {
		ts, err := c.store.List(ctx, lf)
		if err != nil {
			return n, err
		}
		n += len(ts)
		if len(ts) < page {
			return n, nil
		}
		lf.AfterID = ts[len(ts)-1].ID
	}
}

// taskJobDryRun counts and samples what the job would change now.
func (c *Client) taskJobDryRun(ctx context.Context, p TaskJobParams, f ListParams, ids []string, now time.Time) (out RedriveProgress, err error) {
	ctx = c.callBudget(ctx)
	defer func() { err = engine.WhereErr(err) }()
	out = RedriveProgress{Kind: p.Action, Snapshot: now, DryRun: true}
	size := p.SampleSize
	if size == 0 {
		size = DefaultRedriveSample
	}
	pv := &RedrivePreview{Sample: []RedriveSample{}}
	add := func(t *Task) {
		pv.Matched++
		if len(pv.Sample) < size {
			pv.Sample = append(pv.Sample, RedriveSample{ID: t.ID, Queue: t.Queue, Kind: t.Kind, State: t.State, Error: t.LastError})
		}
	}
	if ids != nil {
		allowed := store.ActionStates[p.Action]
		for _, id := range ids {
			t, err := c.store.Get(ctx, id)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return out, err
			}
			if slices.Contains(allowed, t.State) {
				add(t)
			}
		}
	} else {
		lf := taskJobList(f, now)
		if pv.Matched, err = c.countTasks(ctx, lf, ""); err != nil {
			return out, fmt.Errorf("%s: %w", p.Action, err)
		}
		if size > 0 && pv.Matched > 0 {
			lf.Limit = size
			ts, err := c.store.List(ctx, lf)
			if err != nil {
				return out, fmt.Errorf("%s: %w", p.Action, err)
			}
			for _, t := range ts {
				pv.Sample = append(pv.Sample, RedriveSample{ID: t.ID, Queue: t.Queue, Kind: t.Kind, State: t.State, Error: t.LastError})
			}
		}
	}
	out.Total, out.Preview = pv.Matched, pv
	return out, nil
}

// resumeTaskJob continues an unfinished task job from its record.
func (c *Client) resumeTaskJob(ctx context.Context, rec store.Redrive, p RedriveParams, progress func(RedriveProgress)) (RedriveProgress, error) {
	var k struct {
		taskJobKey
		OperatorReason string `json:"operator_reason,omitempty"`
	}
	if err := json.Unmarshal(rec.Filter, &k); err != nil {
		return RedriveProgress{}, fmt.Errorf("job %s: its selection: %w", rec.ID, err)
	}
	tp := TaskJobParams{Action: k.Action, IDs: k.IDs, Priority: k.Priority, Reason: cmp.Or(p.Reason, k.OperatorReason),
		Actor: p.Actor, Rate: p.Rate, Limit: p.Limit, BatchSize: p.BatchSize, Force: p.Force, runner: p.runner,
		Filter: ListParams{States: k.States, Queue: k.Queue, Kind: k.Kind, Attrs: k.Attrs, Where: k.Where}}
	if k.CreatedSince != nil {
		tp.Filter.CreatedSince = *k.CreatedSince
	}
	if k.CreatedUntil != nil {
		tp.Filter.CreatedUntil = *k.CreatedUntil
	}
	tp.All = len(k.IDs) == 0 && len(taskSelection(tp.Filter)) == 0
	return c.TaskJob(ctx, tp, progress)
}
