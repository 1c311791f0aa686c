package api

import (
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
	return writeJSON(w, http.StatusOK, run)
}

// GET /v1/runs/{run_id}/tasks: the query of GET /v1/tasks.
func (s *Server) listRunTasks(w http.ResponseWriter, r *http.Request) error {
	f, err := ParseListQuery(r.URL.Query())
	if err != nil {
		return err
	}
	tasks, err := s.c.RunTasks(r.Context(), r.PathValue("run_id"), f)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, listResponse(principalFrom(r.Context()), tasks, f.Limit))
}
