package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/taskjson"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
)

// Workflows (docs/workflows.md): definitions are registered by an admin,
// runs started by an operator, read by a viewer. Run inputs and step
// results are masked like payloads.

// WorkflowView is a registered version with its definition.
type WorkflowView struct {
	backstop.WorkflowVersion
	Created bool `json:"created,omitempty"`
}

// maxDefinition bounds a definition's body.
const maxDefinition = 1 << 20

// definitionTypes are the media types a definition may be sent as.
var definitionTypes = map[string]bool{"application/json": true, "application/yaml": true,
	"application/x-yaml": true, "text/yaml": true}

// POST /v1/workflows: the body is a definition in JSON or YAML. 201 with
// the new version; 200 when it is the latest version already.
func (s *Server) applyWorkflow(w http.ResponseWriter, r *http.Request) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || !definitionTypes[mt] {
			return fail(codeUnsupportedMedia, "send the definition as application/json or application/yaml")
		}
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxDefinition+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return fail(codeInvalidJSON, "reading the body: "+err.Error())
	}
	if len(b) > maxDefinition {
		return &backstop.ValidationError{Field: "definition", TooLarge: true,
			Message: fmt.Sprintf("is more than %d bytes", maxDefinition)}
	}
	def, err := workflow.Parse(b)
	if err != nil {
		return &backstop.ValidationError{Field: "definition", Message: err.Error()}
	}
	v, created, err := s.c.ApplyWorkflow(actorContext(r), def)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		s.log.Info("workflow registered", "actor", principalFrom(r.Context()).Name, "workflow", v.Name,
			"version", v.Version, "plan_hash", v.PlanHash)
	}
	return writeJSON(w, status, WorkflowView{WorkflowVersion: v, Created: created})
}

// GET /v1/workflows: the latest version of each workflow.
func (s *Server) listWorkflows(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.c.Workflows(r.Context())
	if err != nil {
		return err
	}
	if ws == nil {
		ws = []backstop.WorkflowVersion{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"workflows": ws})
}

// GET /v1/workflows/{name}?version=N
func (s *Server) getWorkflow(w http.ResponseWriter, r *http.Request) error {
	version := 0
	if v := r.URL.Query().Get("version"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return &backstop.ValidationError{Field: "version", Message: fmt.Sprintf("%q is not a version number (1, 2, ...)", v)}
		}
		version = n
	}
	d, _, err := s.c.Workflow(r.Context(), r.PathValue("name"), version)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, WorkflowView{WorkflowVersion: *d})
}

// RunRequest is POST /v1/workflows/{name}/runs.
type RunRequest struct {
	Input   json.RawMessage `json:"input,omitempty"`
	RunID   string          `json:"run_id,omitempty"`
	Version int             `json:"version,omitempty"`
	// Trace samples the run's trace whatever the sampling ratio.
	Trace bool `json:"trace,omitempty"`
}

// POST /v1/workflows/{name}/runs
func (s *Server) startRun(w http.ResponseWriter, r *http.Request) error {
	var req RunRequest
	if err := decodeOptional(r, &req); err != nil {
		return err
	}
	if req.Version < 0 {
		return &backstop.ValidationError{Field: "version", Message: "must not be negative"}
	}
	run, err := s.c.RunWorkflow(actorContext(r), backstop.RunWorkflowParams{Workflow: r.PathValue("name"),
		Version: req.Version, Input: req.Input, RunID: req.RunID, Trace: req.Trace})
	if err != nil {
		return err
	}
	s.log.Info("workflow run started", "actor", principalFrom(r.Context()).Name, "workflow", run.Workflow,
		"version", run.Version, "run_id", run.RunID)
	return writeJSON(w, http.StatusCreated, run)
}

// RunBatchRequest is POST /v1/runs/batch: up to MaxBatch run objects
// ({workflow, version, input, run_id, trace}), started in one transaction
// (all or nothing).
type RunBatchRequest struct {
	Runs []json.RawMessage `json:"runs"`
}

// RunBatchResponse lists the started runs in the order of the request.
type RunBatchResponse struct {
	Results []backstop.RunStarted `json:"results"`
}

// POST /v1/runs/batch: 201 with every run; a bad run is 400 (404 for a
// workflow or version not registered, 409 for a run id that exists) with
// its index, and nothing is written.
func (s *Server) startRunBatch(w http.ResponseWriter, r *http.Request) error {
	var req RunBatchRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if len(req.Runs) == 0 {
		return &apiError{code: codeInvalidInput, field: "runs", detail: "runs: give at least one run"}
	}
	if len(req.Runs) > MaxBatch {
		return &apiError{code: codeTooLarge, field: "runs", detail: fmt.Sprintf("runs: at most %d per batch, got %d", MaxBatch, len(req.Runs))}
	}
	ps := make([]backstop.RunWorkflowParams, len(req.Runs))
	for i, raw := range req.Runs {
		p, err := taskjson.DecodeRun(raw)
		if err != nil {
			return &backstop.BatchError{Index: i, Of: "run", Err: &apiError{code: codeInvalidJSON, field: fmt.Sprintf("runs[%d]", i),
				detail: fmt.Sprintf("runs[%d]: %v", i, err)}}
		}
		ps[i] = p
	}
	runs, err := s.c.RunWorkflows(actorContext(r), ps)
	if err != nil {
		return err
	}
	s.log.Info("workflow runs started", "actor", principalFrom(r.Context()).Name, "runs", len(runs))
	return writeJSON(w, http.StatusCreated, RunBatchResponse{Results: runs})
}

// GET /v1/runs?workflow=W&state=S&before=RUN_ID&limit=N: workflow runs,
// newest first; next_cursor is the last run's id (pass it as before).
func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := backstop.ListRunsParams{Workflow: q.Get("workflow"), BeforeID: q.Get("before"), Limit: 100}
	for _, st := range q["state"] {
		for _, one := range strings.Split(st, ",") {
			f.States = append(f.States, store.RunState(one))
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return &backstop.ValidationError{Field: "limit", Message: fmt.Sprintf("%q: must be 1-1000", v)}
		}
		f.Limit = n
	}
	for k := range q {
		switch k {
		case "workflow", "state", "before", "limit":
		default:
			return &backstop.ValidationError{Field: k, Message: "unknown query parameter (workflow, state, before, limit)"}
		}
	}
	runs, err := s.c.WorkflowRuns(r.Context(), f)
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	for i := range runs {
		runs[i].Input = p.maskJSON(runs[i].Input)
	}
	if runs == nil {
		runs = []store.RunRecord{}
	}
	next := ""
	if len(runs) == f.Limit {
		next = runs[len(runs)-1].RunID
	}
	return writeJSON(w, http.StatusOK, map[string]any{"runs": runs, "next_cursor": next})
}

// POST /v1/runs/{run_id}/cancel
func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request) error {
	var req CancelRequest
	if err := decodeOptional(r, &req); err != nil {
		return err
	}
	if err := backstop.CheckReason("reason", req.Reason, false); err != nil {
		return err
	}
	run, err := s.c.CancelRun(backstop.WithReason(actorContext(r), req.Reason), r.PathValue("run_id"))
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	s.log.Info("workflow run canceled", "actor", p.Name, "run_id", run.RunID, "state", run.State)
	maskRun(p, run)
	return writeJSON(w, http.StatusOK, run)
}

// CompleteStepRequest forces a dead or stuck step row to succeeded.
type CompleteStepRequest struct {
	// Item: the fan-out item (0 for a step without for_each).
	Item int `json:"item"`
	// Result: the step's result (any JSON; absent or null: null).
	Result json.RawMessage `json:"result,omitempty"`
	// Reason: why (required), recorded with the actor.
	Reason string `json:"reason"`
}

// POST /v1/runs/{run_id}/steps/{step}/complete (admin): the run goes on
// from the forced step (Client.CompleteStep).
func (s *Server) completeStep(w http.ResponseWriter, r *http.Request) error {
	var req CompleteStepRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	run, err := s.c.CompleteStep(actorContext(r), backstop.CompleteStepParams{RunID: r.PathValue("run_id"),
		Step: r.PathValue("step"), Item: req.Item, Result: req.Result, Reason: req.Reason})
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	s.log.Info("workflow step force-completed", "actor", p.Name, "run_id", run.RunID, "step_id", r.PathValue("step"),
		"item", req.Item, "state", run.State)
	maskRun(p, run)
	return writeJSON(w, http.StatusOK, run)
}

// maskRun masks a run's input and its steps' results as payloads are.
func maskRun(p principal, run *backstop.WorkflowRun) {
	run.Input = p.maskJSON(run.Input)
	maskSteps(p, run.Steps)
}

func maskSteps(p principal, steps []backstop.RunStep) {
	for i := range steps {
		if len(steps[i].Result) > 0 {
			steps[i].Result = p.maskJSON(steps[i].Result)
		}
	}
}

// maskJSON is a JSON value (not a task's payload) as p may see it.
func (p principal) maskJSON(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return b
	}
	m := p.mask
	if m == nil {
		m = defaultMasker
	}
	return m.JSON(b)
}
