package api

import (
	"context"
	"net/http"

	"github.com/backstophq/backstop"
)

// Runs: the tasks that share a run_id attribute (backstop.RunAttribute),
// summarised by the library (runs.go at the root).

// RunView is GET /v1/runs/{run_id}.
type RunView = backstop.Run

// GET /v1/runs/{run_id}
func (s *Server) getRun(w http.ResponseWriter, r *http.Request) error {
	run, err := s.c.Run(r.Context(), r.PathValue("run_id"))
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	run.Input = p.maskJSON(run.Input)
	maskSteps(p, run.Steps)
	return writeJSON(w, http.StatusOK, run)
}

// GET /v1/runs/{run_id}/tasks: the query of GET /v1/tasks (include=payload
// too), within the byte budget (listpage.go).
func (s *Server) listRunTasks(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	withPayload, err := takeInclude(q)
	if err != nil {
		return err
	}
	f, err := ParseListQuery(q)
	if err != nil {
		return err
	}
	runID := r.PathValue("run_id")
	return s.writeList(w, r, f, withPayload, func(ctx context.Context, f backstop.ListParams) ([]*backstop.Task, error) {
		return s.c.RunTasks(ctx, runID, f)
	})
}
