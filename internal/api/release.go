package api

import (
	"net/http"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/remote"
)

// ReleaseRequest is POST /v1/tasks/{id}/release: give the attempt back
// uncharged (a draining worker whose grace ran out).
type ReleaseRequest struct {
	LeaseToken string       `json:"lease_token"`
	Progress   *bt.Progress `json:"progress"`
}

func (s *Server) release(w http.ResponseWriter, r *http.Request) error {
	var req ReleaseRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	res, err := s.rp.Release(actorContext(r), r.PathValue("id"), req.LeaseToken, req.Progress)
	if err != nil {
		return err
	}
	s.log.Info("task released", append(append([]any{"actor", principalFrom(r.Context()).Name}, resultTaskAttrs(res)...),
		traceArgs(res.Span)...)...)
	return writeJSON(w, http.StatusOK, res)
}

// resultTaskAttrs name the task of a remote report's result in a log line:
// its correlation attributes when the server read the task, else its id.
func resultTaskAttrs(res *remote.Result) []any {
	if res.Task != nil {
		return engine.TaskLogAttrs(res.Task)
	}
	return []any{"task_id", res.TaskID}
}
