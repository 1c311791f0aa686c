package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/redact"
	"github.com/backstophq/backstop/store"
)

// backend is what the task and dead-letter commands call: the library on
// the database (--db), or a Backstop server over its HTTP API (--server).
// Both return the library's types, so each command prints the same output
// whichever it talks to.
type backend interface {
	Enqueue(ctx context.Context, p backstop.EnqueueParams) (*backstop.EnqueueResult, error)
	EnqueueMany(ctx context.Context, ps []backstop.EnqueueParams) ([]backstop.EnqueueResult, error)
	// Publish writes one outbox message (publish.go).
	Publish(ctx context.Context, m backstop.Message) (*backstop.EnqueueResult, error)
	// Validate checks records before any is written; over HTTP it is the
	// server's job (each batch request is all or nothing) and returns nil.
	Validate(ps ...backstop.EnqueueParams) error
	List(ctx context.Context, f backstop.ListParams) ([]*backstop.Task, error)
	DeadLetters(ctx context.Context, f backstop.ListParams) ([]*backstop.Task, error)
	// Show returns a task with its executions and history.
	// Show returns a task with one window of its executions, what the
	// window left out, and the task's history.
	Show(ctx context.Context, id string, win backstop.ExecutionWindow) (*backstop.Task, backstop.ExecutionsPage, []bt.Event, error)
	Cancel(ctx context.Context, p backstop.CancelParams) (*backstop.Task, error)
	Replay(ctx context.Context, p backstop.ReplayParams) (*backstop.ReplayResult, error)
	Discard(ctx context.Context, p backstop.DiscardParams) (*backstop.Task, error)
	Resolve(ctx context.Context, p backstop.ResolveParams) (*backstop.Task, error)
	PurgeDLQ(ctx context.Context, p backstop.PurgeParams) (int, error)
	// CloseMatching discards or resolves a batch of the open dead letters
	// a filter matches (dlq_bulk.go).
	CloseMatching(ctx context.Context, p backstop.CloseMatchingParams) (backstop.CloseMatchingResult, error)
	ExportDLQ(ctx context.Context, f backstop.ListParams, fn func(backstop.DeadLetterExport) error) (int, error)
	Redrive(ctx context.Context, p backstop.RedriveParams, progress func(backstop.RedriveProgress)) (backstop.RedriveProgress, error)
	// TaskJob runs an action on live tasks as a bulk job (tasks_bulk.go).
	TaskJob(ctx context.Context, p backstop.TaskJobParams, progress func(backstop.RedriveProgress)) (backstop.RedriveProgress, error)
	// Logs reads an execution's log lines with seq > after (logs.go).
	Logs(ctx context.Context, taskID, executionID string, after, limit int) ([]backstop.LogLine, error)
	Close() error
}

// backend opens what --server / --db name. cfg applies to the database only
// (a server has its own configuration).
func (a *app) backend(ctx context.Context, cfg *backstop.Config) (backend, error) {
	if a.server != "" {
		return &remoteBackend{cl: apiclient.New(a.server, a.token), raw: a.raw}, nil
	}
	if cfg == nil {
		cfg = &backstop.Config{}
	}
	cfg.RedactKeys = a.redactKeys()
	req, err := requireReason()
	if err != nil {
		return nil, err
	}
	cfg.RequireReason = cfg.RequireReason || req
	if cfg.PurgeFloor, err = purgeFloor(); err != nil { // dlq_bulk.go
		return nil, err
	}
	if cfg.WhereCost == 0 && cfg.WhereTime == 0 {
		if cfg.WhereCost, cfg.WhereTime, err = whereBudget(); err != nil { // dlq_bulk.go
			return nil, err
		}
	}
	if cfg.RedriveHeartbeat == 0 {
		if cfg.RedriveHeartbeat, err = redriveHeartbeat(); err != nil { // redrives.go
			return nil, err
		}
	}
	s, c, err := a.openDB(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &localBackend{Client: c, close: s.Close, mask: c.Masker(), raw: a.raw, via: a.via, actor: defaultActor()}, nil
}

// refuseOverServer refuses flags that mean nothing over --server.
func (a *app) refuseOverServer(flags map[string]bool, why string) error {
	if a.server == "" {
		return nil
	}
	for name, changed := range flags {
		if changed {
			return usageErr("--%s cannot be used with --server: %s", name, why)
		}
	}
	return nil
}

// localBackend is the library on the database. Like the API, it masks
// every payload it returns (redaction.go) unless --raw asked for them as
// stored, which is audited.
type localBackend struct {
	*backstop.Client
	close func() error
	mask  *redact.Masker
	raw   bool
	via   string // the command, for the audit event
	actor string
	shown []*backstop.Task // raw views to audit at Close
}

func (l *localBackend) Close() error {
	if len(l.shown) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := l.AuditPayloadViews(ctx, l.actor, "cli "+l.via, l.shown); err != nil {
			l.close()
			return fmt.Errorf("auditing the raw payload view: %w", err)
		}
	}
	return l.close()
}

// out prepares a task for printing: masked, or raw and recorded.
func (l *localBackend) out(t *backstop.Task) *backstop.Task {
	if t == nil {
		return nil
	}
	if l.raw {
		if t.Payload != nil { // a summary shows no payload: nothing to audit
			l.shown = append(l.shown, t)
		}
		return t
	}
	cp := *t
	cp.Payload = l.mask.JSON(t.Payload)
	return &cp
}

func (l *localBackend) outs(ts []*backstop.Task) []*backstop.Task {
	for i, t := range ts {
		ts[i] = l.out(t)
	}
	return ts
}

func (l *localBackend) events(evs []bt.Event) []bt.Event {
	if l.raw {
		return evs
	}
	return backstop.MaskEvents(l.mask, evs)
}

func (l *localBackend) Show(ctx context.Context, id string, win backstop.ExecutionWindow) (*backstop.Task, backstop.ExecutionsPage, []bt.Event, error) {
	t, page, err := l.GetWindow(ctx, id, win)
	if err != nil {
		return nil, page, nil, err
	}
	evs, err := l.Events(ctx, t.ID)
	return l.out(t), page, l.events(evs), err
}

func (l *localBackend) Enqueue(ctx context.Context, p backstop.EnqueueParams) (*backstop.EnqueueResult, error) {
	r, err := l.Client.Enqueue(ctx, p)
	if err == nil {
		r.Task = l.out(r.Task)
	}
	return r, err
}

func (l *localBackend) EnqueueMany(ctx context.Context, ps []backstop.EnqueueParams) ([]backstop.EnqueueResult, error) {
	rs, err := l.Client.EnqueueMany(ctx, ps)
	for i := range rs {
		rs[i].Task = l.out(rs[i].Task)
	}
	return rs, err
}

func (l *localBackend) List(ctx context.Context, f backstop.ListParams) ([]*backstop.Task, error) {
	ts, err := l.Client.List(ctx, f)
	return l.outs(ts), err
}

func (l *localBackend) DeadLetters(ctx context.Context, f backstop.ListParams) ([]*backstop.Task, error) {
	ts, err := l.Client.DeadLetters(ctx, f)
	return l.outs(ts), err
}

// Redrive: a dry run's sampled payloads are masked, as payloads are.
func (l *localBackend) Redrive(ctx context.Context, p backstop.RedriveParams, progress func(backstop.RedriveProgress)) (backstop.RedriveProgress, error) {
	out, err := l.Client.Redrive(ctx, p, progress)
	out.Preview.Mask(l.mask)
	return out, err
}

func (l *localBackend) Cancel(ctx context.Context, p backstop.CancelParams) (*backstop.Task, error) {
	t, err := l.Client.CancelTask(ctx, p)
	return l.out(t), err
}

func (l *localBackend) Replay(ctx context.Context, p backstop.ReplayParams) (*backstop.ReplayResult, error) {
	r, err := l.Client.Replay(ctx, p)
	if err == nil && r.Task != nil {
		r.Task = l.out(r.Task)
	}
	return r, err
}

func (l *localBackend) Discard(ctx context.Context, p backstop.DiscardParams) (*backstop.Task, error) {
	t, err := l.Client.Discard(ctx, p)
	return l.out(t), err
}

func (l *localBackend) Resolve(ctx context.Context, p backstop.ResolveParams) (*backstop.Task, error) {
	t, err := l.Client.Resolve(ctx, p)
	return l.out(t), err
}

func (l *localBackend) ExportDLQ(ctx context.Context, f backstop.ListParams, fn func(backstop.DeadLetterExport) error) (int, error) {
	return l.Client.ExportDLQ(ctx, f, func(d backstop.DeadLetterExport) error {
		d.Task = l.out(d.Task)
		d.Events = l.events(d.Events)
		return fn(d)
	})
}

// remoteBackend speaks the HTTP API; the server masks payloads (raw: ask
// for them as stored, which the server audits).
type remoteBackend struct {
	cl  *apiclient.Client
	raw bool
}

func (r *remoteBackend) rawQuery(q url.Values) url.Values {
	if r.raw {
		q.Set("raw", "true")
	}
	return q
}

func (r *remoteBackend) Close() error { return nil }

func (r *remoteBackend) Validate(...backstop.EnqueueParams) error { return nil }

// remoteErr turns an API problem into the error the library would have
// returned, so exit codes match: 400/413/415/422 → 2, 404 → 3, 409 → 4.
func remoteErr(err error) error {
	var p *api.Problem
	if !errors.As(err, &p) {
		return err
	}
	msg := p.Detail
	if msg == "" {
		msg = p.Title
	}
	code := ExitFailure
	switch p.Status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity:
		code = ExitUsage
	case http.StatusNotFound:
		code = ExitNotFound
	case http.StatusConflict:
		code = ExitConflict
	case http.StatusUnauthorized, http.StatusForbidden:
		msg = fmt.Sprintf("%s (server %s: %s)", msg, strconv.Itoa(p.Status), p.Code)
	case http.StatusServiceUnavailable:
		return &store.UnavailableError{Cause: "server " + strconv.Itoa(p.Status), Err: errors.New(msg)}
	}
	e := &exitError{code: code, err: errors.New(msg)}
	if p.Index != nil {
		return &backstop.BatchError{Index: *p.Index, Err: e}
	}
	return e
}

// taskFromView is the library task an API view carries.
func taskFromView(v api.TaskView) *backstop.Task {
	if v.Task == nil {
		return nil
	}
	t := *v.Task
	if v.Executions != nil {
		t.Executions = *v.Executions
	}
	return &t
}

func enqueueBody(p backstop.EnqueueParams) apiclient.Task {
	t := apiclient.Task{ID: p.ID, Queue: p.Queue, Kind: p.Kind, Payload: p.Payload, Priority: p.Priority,
		Delay: bt.Duration(p.Delay), MaxAttempts: p.MaxAttempts, Timeout: bt.Duration(p.Timeout), Retry: p.Retry,
		Attributes: p.Attributes, IdempotencyKey: p.IdempotencyKey, UniqueFor: bt.Duration(p.UniqueFor), MergeKey: p.MergeKey, Complexity: p.Complexity,
		OrderingKey: p.OrderingKey, Sequence: p.Sequence, Trace: p.Trace}
	if !p.RunAt.IsZero() {
		at := p.RunAt
		t.RunAt = &at
	}
	if d := p.Debounce; d != nil {
		t.Debounce = &apiclient.Debounce{Key: d.Key, For: bt.Duration(d.For), MaxWait: bt.Duration(d.MaxWait)}
	}
	if !p.Deadline.IsZero() {
		at := p.Deadline
		t.Deadline = &at
	}
	if p.Progress != (backstop.Progress{}) {
		pr := p.Progress
		t.Progress = &pr
	}
	return t
}

// checkPayloads refuses a payload that is not JSON before it is sent (the
// request could not carry it), as the library would.
func checkPayloads(ps []backstop.EnqueueParams) error {
	for i, p := range ps {
		if len(p.Payload) > 0 && !json.Valid(p.Payload) {
			return &backstop.BatchError{Index: i, Err: &exitError{code: ExitUsage, err: errors.New("payload: is not valid JSON")}}
		}
	}
	return nil
}

func (r *remoteBackend) Enqueue(ctx context.Context, p backstop.EnqueueParams) (*backstop.EnqueueResult, error) {
	if err := checkPayloads([]backstop.EnqueueParams{p}); err != nil {
		return nil, errors.Unwrap(err)
	}
	res, err := r.cl.Enqueue(ctx, enqueueBody(p))
	if err != nil {
		return nil, remoteErr(err)
	}
	return &backstop.EnqueueResult{Task: taskFromView(res.Task), Merged: res.Merged, Duplicate: res.Duplicate}, nil
}

func (r *remoteBackend) EnqueueMany(ctx context.Context, ps []backstop.EnqueueParams) ([]backstop.EnqueueResult, error) {
	if err := checkPayloads(ps); err != nil {
		return nil, err
	}
	ts := make([]apiclient.Task, len(ps))
	for i, p := range ps {
		ts[i] = enqueueBody(p)
	}
	res, err := r.cl.EnqueueBatch(ctx, ts)
	if err != nil {
		return nil, remoteErr(err)
	}
	out := make([]backstop.EnqueueResult, len(res.Results))
	for i, x := range res.Results {
		out[i] = backstop.EnqueueResult{Task: taskFromView(x.Task), Merged: x.Merged, Duplicate: x.Duplicate}
	}
	return out, nil
}

// listQuery is a ListParams as the query of GET /v1/tasks or /v1/dlq.
func listQuery(f backstop.ListParams, dlq bool) url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("queue", f.Queue)
	set("kind", f.Kind)
	set("after", f.AfterID)
	set("where", f.Where)
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	if !f.WithoutPayload {
		q.Set("include", "payload")
	}
	for k, v := range f.Attrs {
		q.Add("attr", k+"="+v)
	}
	if !dlq {
		for _, s := range f.States {
			q.Add("state", string(s))
		}
		if !f.CreatedSince.IsZero() {
			q.Set("created_since", f.CreatedSince.UTC().Format(time.RFC3339Nano))
		}
		if !f.CreatedUntil.IsZero() {
			q.Set("created_until", f.CreatedUntil.UTC().Format(time.RFC3339Nano))
		}
		return q
	}
	set("reason", string(f.Reason))
	set("error_contains", f.ErrorContains)
	for _, s := range f.DLQStatuses {
		q.Add("status", string(s))
	}
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		q.Set("until", f.Until.UTC().Format(time.RFC3339Nano))
	}
	return q
}

func tasksOf(page *api.ListResponse) []*backstop.Task {
	out := make([]*backstop.Task, len(page.Items))
	for i, v := range page.Items {
		out[i] = taskFromView(v)
	}
	return out
}

// listPages reads up to f.Limit tasks (default 100) from a server list,
// following next_cursor: a server ends a page early at its byte budget, and
// the CLI prints what the library would (f.Limit tasks while there are).
func (r *remoteBackend) listPages(ctx context.Context, f backstop.ListParams, dlq bool,
	get func(context.Context, url.Values) (*api.ListResponse, error)) ([]*backstop.Task, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	var out []*backstop.Task
	err := apiclient.EachPage(ctx, r.rawQuery(listQuery(f, dlq)), limit, get, func(page *api.ListResponse) (bool, error) {
		out = append(out, tasksOf(page)...)
		return len(out) < limit, nil
	})
	if err != nil {
		return nil, remoteErr(err)
	}
	return out, nil
}

func (r *remoteBackend) List(ctx context.Context, f backstop.ListParams) ([]*backstop.Task, error) {
	return r.listPages(ctx, f, false, r.cl.List)
}

func (r *remoteBackend) DeadLetters(ctx context.Context, f backstop.ListParams) ([]*backstop.Task, error) {
	return r.listPages(ctx, f, true, r.cl.DLQList)
}

func (r *remoteBackend) Show(ctx context.Context, id string, win backstop.ExecutionWindow) (*backstop.Task, backstop.ExecutionsPage, []bt.Event, error) {
	d, err := r.cl.Show(ctx, id, r.raw, win)
	if err != nil {
		return nil, backstop.ExecutionsPage{}, nil, remoteErr(err)
	}
	page := backstop.ExecutionsPage{Total: d.ExecutionsTotal}
	if d.ExecutionsNext != nil {
		page.Next = *d.ExecutionsNext
	}
	return taskFromView(d.TaskView), page, d.Events, nil
}

func (r *remoteBackend) Cancel(ctx context.Context, p backstop.CancelParams) (*backstop.Task, error) {
	v, err := r.cl.CancelWith(ctx, p.ID, api.CancelRequest{Reason: p.Reason})
	if err != nil {
		return nil, remoteErr(err)
	}
	return taskFromView(*v), nil
}

func patchRequest(merge json.RawMessage, ops []backstop.PatchOp, keep bool, delay time.Duration, runAt time.Time) (api.PatchRequest, error) {
	p := api.PatchRequest{MergePatch: merge, KeepAttempts: keep, Delay: bt.Duration(delay)}
	if len(ops) > 0 {
		b, err := json.Marshal(ops)
		if err != nil {
			return p, err
		}
		p.Patch = b
	}
	if !runAt.IsZero() {
		p.RunAt = &runAt
	}
	return p, nil
}

func (r *remoteBackend) Replay(ctx context.Context, p backstop.ReplayParams) (*backstop.ReplayResult, error) {
	pr, err := patchRequest(p.MergePatch, p.Patch, p.KeepAttempts, p.Delay, p.RunAt)
	if err != nil {
		return nil, err
	}
	res, err := r.cl.Replay(ctx, p.ID, api.ReplayRequest{PatchRequest: pr, NewID: p.NewID, Reopen: p.Reopen, Reason: p.Reason})
	if err != nil {
		return nil, remoteErr(err)
	}
	out := &backstop.ReplayResult{Replayed: res.Replayed, ID: res.ID, NewID: res.NewID, State: res.State, DLQStatus: res.DLQStatus}
	if res.Task != nil {
		out.Task = taskFromView(*res.Task)
	}
	return out, nil
}

func (r *remoteBackend) Discard(ctx context.Context, p backstop.DiscardParams) (*backstop.Task, error) {
	v, err := r.cl.Discard(ctx, p.ID, p.Reason)
	if err != nil {
		return nil, remoteErr(err)
	}
	return taskFromView(*v), nil
}

func (r *remoteBackend) Resolve(ctx context.Context, p backstop.ResolveParams) (*backstop.Task, error) {
	v, err := r.cl.ResolveWith(ctx, p.ID, api.ResolveRequest{Note: p.Note, Reason: p.Reason})
	if err != nil {
		return nil, remoteErr(err)
	}
	return taskFromView(*v), nil
}

func (r *remoteBackend) PurgeDLQ(ctx context.Context, p backstop.PurgeParams) (int, error) {
	res, err := r.cl.PurgeDLQ(ctx, api.PurgeRequest{OlderThan: bt.Duration(p.OlderThan), Statuses: p.Statuses, DryRun: p.DryRun,
		ConfirmOpen: p.ConfirmOpen, Reason: p.Reason, Where: p.Where, BelowFloor: p.BelowFloor})
	if err != nil {
		return 0, remoteErr(err)
	}
	if p.DryRun {
		return res.WouldPurge, nil
	}
	return res.Purged, nil
}

func (r *remoteBackend) ExportDLQ(ctx context.Context, f backstop.ListParams, fn func(backstop.DeadLetterExport) error) (int, error) {
	q := r.rawQuery(listQuery(f, true))
	q.Del("include") // an export always carries the payloads
	if f.Limit == 0 {
		q.Del("limit")
	}
	n, err := r.cl.ExportDLQ(ctx, q, func(l api.ExportLine) error {
		return fn(backstop.DeadLetterExport{Task: l.Task, Executions: l.Executions, Events: l.Events})
	})
	return n, remoteErr(err)
}

// remoteRedrivePoll is how often a redrive the server runs is polled.
const remoteRedrivePoll = 500 * time.Millisecond

func (r *remoteBackend) Redrive(ctx context.Context, p backstop.RedriveParams, progress func(backstop.RedriveProgress)) (backstop.RedriveProgress, error) {
	pr, err := patchRequest(p.MergePatch, p.Patch, p.KeepAttempts, p.Delay, p.RunAt)
	if err != nil {
		return backstop.RedriveProgress{}, err
	}
	f := p.Filter
	req := api.RedriveRequest{Queue: f.Queue, Kind: f.Kind, Reason: f.Reason, ErrorContains: f.ErrorContains,
		Attributes: f.Attrs, Where: f.Where, Rate: p.Rate, Limit: p.Limit, PatchRequest: pr, Why: p.Reason, Wait: bt.Duration(5 * time.Second),
		DryRun: p.DryRun, Sample: max(p.SampleSize, 0), Workflow: p.Steps.Workflow, RunID: p.Steps.RunID, Step: p.Steps.Step,
		All: p.All}
	if !f.Since.IsZero() {
		req.Since = &f.Since
	}
	if !f.Until.IsZero() {
		req.Until = &f.Until
	}
	st, err := r.cl.Redrive(ctx, req)
	return r.awaitJob(ctx, st, err, p.DryRun, progress)
}

// awaitJob follows a bulk job the server runs (a redrive, a task action)
// until it ends, reporting its progress: st and err are the answer that
// started it.
func (r *remoteBackend) awaitJob(ctx context.Context, st *api.RedriveStatus, err error, dryRun bool,
	progress func(backstop.RedriveProgress)) (backstop.RedriveProgress, error) {
	if err == nil && dryRun {
		return st.RedriveProgress, nil
	}
	for err == nil && st.Status == "running" {
		progress(st.RedriveProgress)
		select {
		case <-ctx.Done():
			return st.RedriveProgress, fmt.Errorf("stopped waiting; redrive %s goes on in the server (GET /v1/redrives/%s): %w",
				st.RedriveID, st.RedriveID, backstop.ErrInterrupted)
		case <-time.After(remoteRedrivePoll):
		}
		st, err = r.cl.RedriveStatus(ctx, st.RedriveID)
	}
	if err != nil {
		return backstop.RedriveProgress{}, remoteErr(err)
	}
	progress(st.RedriveProgress)
	return st.RedriveProgress, redriveEnd(st)
}

// redriveEnd is the error of a server's redrive that ended as st says: nil
// when it ended well; over_budget (the server's where budget) is bad
// input (exit 2); failed, interrupted and the statuses also named in bad
// are failures.
func redriveEnd(st *api.RedriveStatus, bad ...string) error {
	switch {
	case st.Status == "over_budget":
		return &backstop.ValidationError{Field: "where",
			Message: fmt.Sprintf("redrive %s over_budget: %s", st.RedriveID, strings.TrimSpace(st.Error))}
	case st.Status == "failed" || st.Status == "interrupted" || slices.Contains(bad, st.Status):
		return fmt.Errorf("redrive %s %s: %s", st.RedriveID, st.Status, strings.TrimSpace(st.Error))
	}
	return nil
}
