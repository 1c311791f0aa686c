package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
)

// TaskJobRequest is POST /v1/tasks/bulk: an action on live tasks picked by
// id or selected by a filter, run as a bulk job in the server like a
// redrive (its record, progress, cancel and resume are /v1/redrives/{id}'s).
type TaskJobRequest struct {
	// Action: task.cancel, task.run_now, task.delete (reason required) or
	// task.reprioritize (priority required).
	Action string `json:"action"`
	// IDs picks tasks (at most 1000); or the filter selects them: states
	// (default: every state the action changes), queue, kind, attributes,
	// since and until (creation time), where. Not both.
	IDs        []string          `json:"ids,omitempty"`
	States     []bt.State        `json:"states,omitempty"`
	Queue      string            `json:"queue,omitempty"`
	Kind       string            `json:"kind,omitempty"`
	Attributes map[string]string `json:"attributes,omitempty"`
	Since      *time.Time        `json:"since,omitempty"`
	Until      *time.Time        `json:"until,omitempty"`
	Where      string            `json:"where,omitempty"`
	// All: nothing above selects, and every task the action changes is
	// meant. Without a selection and without all: 400 naming all (a dry run
	// needs none).
	All      bool `json:"all,omitempty"`
	Priority *int `json:"priority,omitempty"`
	// Reason: recorded with the actor in each task's event and on the
	// job's record.
	Reason string  `json:"reason,omitempty"`
	Rate   float64 `json:"rate,omitempty"`
	Limit  int     `json:"limit,omitempty"`
	// Wait: answer when the job finished or after this long (at most 30s).
	Wait bt.Duration `json:"wait,omitempty"`
	// DryRun changes nothing and answers 200 with status "dry_run" and a
	// preview: how many match now and a sample (Sample, default 5, at
	// most 100).
	DryRun bool `json:"dry_run,omitempty"`
	Sample int  `json:"sample,omitempty"`
}

// POST /v1/tasks/bulk
func (s *Server) taskJob(w http.ResponseWriter, r *http.Request) error {
	var req TaskJobRequest
	if err := decodeOptional(r, &req); err != nil {
		return err
	}
	wait := time.Duration(req.Wait)
	if wait < 0 || wait > MaxRedriveWait {
		return &apiError{code: codeInvalidInput, field: "wait", detail: fmt.Sprintf("wait: must be between 0s and %s", MaxRedriveWait)}
	}
	if req.Sample < 0 || req.Sample > maxRedriveSample {
		return &apiError{code: codeInvalidInput, field: "sample", detail: fmt.Sprintf("sample: must be between 0 and %d", maxRedriveSample)}
	}
	p := principalFrom(r.Context())
	tp := backstop.TaskJobParams{Action: req.Action, IDs: req.IDs, Priority: req.Priority, Reason: req.Reason, Actor: p.Name,
		All: req.All, DryRun: req.DryRun, SampleSize: req.Sample, Rate: req.Rate, Limit: req.Limit,
		Filter: backstop.ListParams{States: req.States, Queue: req.Queue, Kind: req.Kind, Attrs: req.Attributes, Where: req.Where}}
	if req.Since != nil {
		tp.Filter.CreatedSince = *req.Since
	}
	if req.Until != nil {
		tp.Filter.CreatedUntil = *req.Until
	}
	if req.DryRun {
		prog, err := s.c.TaskJob(r.Context(), tp, nil)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, RedriveStatus{RedriveProgress: prog, Status: "dry_run", Actor: p.Name, Why: req.Reason, StartedAt: s.now()})
	}
	run, err := s.redrives.startWith(func(ctx context.Context, progress func(backstop.RedriveProgress)) (backstop.RedriveProgress, error) {
		return s.c.TaskJob(ctx, tp, progress)
	}, backstop.RedriveParams{Actor: p.Name, Reason: req.Reason}, s.now)
	if err != nil {
		return err
	}
	st, status := awaitRun(r, run, wait)
	s.log.Info("task bulk action", "action", req.Action, "actor", p.Name, "reason", req.Reason, "job_id", st.RedriveID,
		"status", st.Status, "total", st.Total)
	w.Header().Set("Location", "/v1/redrives/"+st.RedriveID)
	return writeJSON(w, status, s.withRecord(r.Context(), p, st, nil))
}
