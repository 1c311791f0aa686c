package api

import (
	"net/http"
	"time"
)

// Pausing a queue stops every worker, in-process or remote, from claiming
// its tasks (the store's claim skips it); the library decides (queues.go at
// the root).

// QueuePauseResponse is POST /v1/queues/{name}/pause and /resume. Changed
// is false when the queue already was in that state.
type QueuePauseResponse struct {
	Name     string     `json:"name"`
	Paused   bool       `json:"paused"`
	PausedAt *time.Time `json:"paused_at,omitempty"`
	PausedBy string     `json:"paused_by,omitempty"`
	Changed  bool       `json:"changed"`
}

// POST /v1/queues/{name}/pause
func (s *Server) pauseQueue(w http.ResponseWriter, r *http.Request) error {
	p := principalFrom(r.Context())
	st, changed, err := s.c.PauseQueue(r.Context(), r.PathValue("name"), p.Name)
	if err != nil {
		return err
	}
	s.log.Info("queue pause", "actor", p.Name, "queue", st.Name, "changed", changed)
	at := st.PausedAt
	return writeJSON(w, http.StatusOK, QueuePauseResponse{Name: st.Name, Paused: true, PausedAt: &at, PausedBy: st.PausedBy, Changed: changed})
}

// POST /v1/queues/{name}/resume
func (s *Server) resumeQueue(w http.ResponseWriter, r *http.Request) error {
	p := principalFrom(r.Context())
	name := r.PathValue("name")
	changed, err := s.c.ResumeQueue(r.Context(), name, p.Name)
	if err != nil {
		return err
	}
	s.log.Info("queue resume", "actor", p.Name, "queue", name, "changed", changed)
	return writeJSON(w, http.StatusOK, QueuePauseResponse{Name: name, Changed: changed})
}
