package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/taskjson"
)

// Limits of the task endpoints.
const (
	// MaxBatch is the most tasks one POST /v1/tasks/batch may carry.
	MaxBatch = 1000
	// defaultListLimit is the page size when a listing gives no limit.
	defaultListLimit = 100
)

// TaskView is a task as the API returns it: the task's snake_case JSON
// (backstoptype.Task), attributes always an object, and executions always an
// array when shown.
type TaskView struct {
	*bt.Task
	Executions *[]bt.Execution `json:"executions,omitempty"`
}

// view prepares a task for the caller: the payload masked (redaction.go),
// or raw for an admin's audited ?raw=true.
func view(p principal, t *bt.Task, withExecutions bool) TaskView {
	cp := *t
	if cp.Attributes == nil {
		cp.Attributes = map[string]string{}
	}
	cp.Payload = p.maskPayload(t)
	v := TaskView{Task: &cp}
	cp.Executions = nil
	if withExecutions {
		ex := t.Executions
		if ex == nil {
			ex = []bt.Execution{}
		}
		v.Executions = &ex
	}
	return v
}

// EnqueueResponse is one enqueued task and what happened to it.
type EnqueueResponse struct {
	Task      TaskView `json:"task"`
	Merged    bool     `json:"merged"`
	Duplicate bool     `json:"duplicate"`
}

func enqueueResponse(p principal, r backstop.EnqueueResult) EnqueueResponse {
	return EnqueueResponse{Task: view(p, r.Task, false), Merged: r.Merged, Duplicate: r.Duplicate}
}

// POST /v1/tasks: the body is one task object (docs/api.md lists its keys).
// 201 when a task was added, 200 when it merged or was a duplicate.
func (s *Server) postTask(w http.ResponseWriter, r *http.Request) error {
	b, err := readBody(r)
	if err != nil {
		return err
	}
	params, err := taskjson.DecodeEnqueue(b)
	if err != nil {
		return &apiError{code: codeInvalidJSON, detail: err.Error()}
	}
	res, err := s.c.Enqueue(actorContext(r), params)
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	s.log.Info("task enqueued", append(append([]any{"actor", p.Name}, engine.TaskLogAttrs(res.Task)...),
		append([]any{"merged", res.Merged, "duplicate", res.Duplicate}, traceParentArgs(res.Task.TraceParent)...)...)...)
	status := http.StatusCreated
	if res.Merged || res.Duplicate {
		status = http.StatusOK
	}
	return writeJSON(w, status, enqueueResponse(p, *res))
}

// BatchRequest is POST /v1/tasks/batch: up to MaxBatch task objects,
// enqueued in one transaction (all or nothing).
type BatchRequest struct {
	Tasks []json.RawMessage `json:"tasks"`
}

// BatchResponse lists the results in the order of the request.
type BatchResponse struct {
	Results []EnqueueResponse `json:"results"`
}

func (s *Server) postTaskBatch(w http.ResponseWriter, r *http.Request) error {
	var req BatchRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if len(req.Tasks) == 0 {
		return &apiError{code: codeInvalidInput, field: "tasks", detail: "tasks: give at least one task"}
	}
	if len(req.Tasks) > MaxBatch {
		return &apiError{code: codeTooLarge, field: "tasks", detail: fmt.Sprintf("tasks: at most %d per batch, got %d", MaxBatch, len(req.Tasks))}
	}
	params := make([]backstop.EnqueueParams, len(req.Tasks))
	for i, raw := range req.Tasks {
		p, err := taskjson.DecodeEnqueue(raw)
		if err != nil {
			return &backstop.BatchError{Index: i, Err: &apiError{code: codeInvalidJSON, field: fmt.Sprintf("tasks[%d]", i),
				detail: fmt.Sprintf("tasks[%d]: %v", i, err)}}
		}
		params[i] = p
	}
	rs, err := s.c.EnqueueMany(actorContext(r), params)
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	out := BatchResponse{Results: make([]EnqueueResponse, len(rs))}
	for i, res := range rs {
		out.Results[i] = enqueueResponse(p, res)
	}
	s.log.Info("tasks enqueued", "actor", p.Name, "tasks", len(rs))
	return writeJSON(w, http.StatusCreated, out)
}

// TaskDetail is GET /v1/tasks/{id}: the task with its executions and its
// history (events, oldest first), as `backstop tasks show` prints it.
type TaskDetail = DeadLetterView

// GET /v1/tasks/{id}: the task with its executions and history.
// ?executions_limit (1..1000, default 100) and ?executions_before (an
// executions_next) choose the window of executions.
func (s *Server) getTask(w http.ResponseWriter, r *http.Request) error {
	v, err := s.taskDetail(r, false)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, v)
}

// taskDetail reads the task of r's {id} with one window of its executions
// and its history; deadOnly: a task that is not dead is not found.
func (s *Server) taskDetail(r *http.Request, deadOnly bool) (*TaskDetail, error) {
	q := r.URL.Query()
	win := backstop.ExecutionWindow{Before: q.Get("executions_before")}
	if v := q.Get("executions_limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > backstop.MaxExecutionsLimit {
			return nil, fail(codeInvalidQuery, fmt.Sprintf("executions_limit %q: want a whole number from 1 to %d", v, backstop.MaxExecutionsLimit))
		}
		win.Limit = n
	}
	t, page, err := s.c.GetWindow(r.Context(), r.PathValue("id"), win)
	if err != nil {
		return nil, err
	}
	if deadOnly && t.State != bt.StateDead {
		return nil, fail(codeNotFound, fmt.Sprintf("task %q is %s, not a dead letter (see GET /v1/tasks/%s)", t.ID, t.State, t.ID))
	}
	evs, err := s.c.Events(r.Context(), t.ID)
	if err != nil {
		return nil, err
	}
	p := principalFrom(r.Context())
	v := &TaskDetail{TaskView: view(p, t, true), Events: maskEvents(p, evs), ExecutionsTotal: page.Total}
	if page.Next != "" {
		v.ExecutionsNext = &page.Next
	}
	return v, nil
}

// ListResponse is a page of a listing; NextCursor (null on the last page)
// goes into the next request's `after`. A task list's items are summaries
// (no payload; payload_size) unless ?include=payload asked for them, and a
// page may end early at the server's byte budget (listpage.go): page on
// while NextCursor is set.
type ListResponse struct {
	Items      []TaskView `json:"items"`
	NextCursor *string    `json:"next_cursor"`
}

// ParseListQuery reads GET /v1/tasks's query: queue, kind, state
// (repeatable or comma-separated), attr (repeatable key=value), order
// (oldest or newest), limit and after (the cursor). Unknown parameters are refused; the library checks
// the values.
func ParseListQuery(q url.Values) (backstop.ListParams, error) {
	var f backstop.ListParams
	bad := func(format string, args ...any) error {
		return fail(codeInvalidQuery, fmt.Sprintf(format, args...))
	}
	for key, vals := range q {
		switch key {
		case "queue", "kind", "limit", "after", "error_contains", "idempotency_key", "created_since", "created_until", "where", "order":
			if len(vals) != 1 {
				return f, bad("%s: give it once", key)
			}
		case "state", "attr":
		default:
			return f, bad("unknown parameter %q (use queue, kind, state, attr, error_contains, idempotency_key, created_since, created_until, where, order, limit, after)", key)
		}
	}
	var err error
	if f.Newest, err = parseOrder(q.Get("order")); err != nil {
		return f, err
	}
	f.Queue, f.Kind, f.AfterID = q.Get("queue"), q.Get("kind"), q.Get("after")
	f.ErrorContains, f.IdempotencyKey = q.Get("error_contains"), q.Get("idempotency_key")
	f.Where = q.Get("where")
	for _, w := range []struct {
		key string
		dst *time.Time
	}{{"created_since", &f.CreatedSince}, {"created_until", &f.CreatedUntil}} {
		v := q.Get(w.key)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return f, bad("%s %q: want an RFC 3339 time", w.key, v)
		}
		*w.dst = t
	}
	for _, v := range q["state"] {
		for _, st := range strings.Split(v, ",") {
			f.States = append(f.States, bt.State(strings.TrimSpace(st)))
		}
	}
	for _, v := range q["attr"] {
		k, val, ok := strings.Cut(v, "=")
		if !ok {
			return f, bad("attr %q: want key=value", v)
		}
		if f.Attrs == nil {
			f.Attrs = map[string]string{}
		}
		if _, dup := f.Attrs[k]; dup {
			return f, bad("attr: key %q is given twice", k)
		}
		f.Attrs[k] = val
	}
	f.Limit = defaultListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return f, bad("limit %q: want a positive whole number", v)
		}
		f.Limit = n
	}
	return f, nil
}

// GET /v1/tasks: summaries, or payloads with ?include=payload, within the
// byte budget (listpage.go).
func (s *Server) listTasks(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	withPayload, err := takeInclude(q)
	if err != nil {
		return err
	}
	f, err := ParseListQuery(q)
	if err != nil {
		return err
	}
	return s.writeList(w, r, f, withPayload, s.c.List)
}

// CancelRequest is POST /v1/tasks/{id}/cancel's optional body.
type CancelRequest struct {
	// Reason: why, recorded with the actor in the task.canceled (or
	// task.cancel_requested) event; required when the server's
	// dlq.require_reason is on.
	Reason string `json:"reason,omitempty"`
}

// POST /v1/tasks/{id}/cancel: at once for a waiting task, cooperatively for
// a running one; a finished task is a conflict.
func (s *Server) cancelTask(w http.ResponseWriter, r *http.Request) error {
	var req CancelRequest
	if err := decodeOptional(r, &req); err != nil {
		return err
	}
	t, err := s.c.CancelTask(actorContext(r), backstop.CancelParams{ID: r.PathValue("id"), Reason: req.Reason})
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	s.log.Info("task cancel requested", "actor", p.Name, "task_id", t.ID, "state", t.State, "reason", req.Reason)
	return writeJSON(w, http.StatusOK, view(p, t, false))
}
