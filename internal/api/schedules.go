package api

import (
	"net/http"
	"time"

	"github.com/backstophq/backstop"
)

// Periodic schedules: the library decides (schedules.go at the root); the
// elected maintenance leader enqueues their ticks.

// ScheduleRequest is the body of POST /v1/schedules: every (a Go duration,
// "90s", "1h") or cron (with tz), the missed-tick policy, and the task.
type ScheduleRequest struct {
	// The schedule as the library takes it (its every, a duration, is
	// never read from JSON: Every below is).
	backstop.ScheduleParams
	Every string `json:"every,omitempty"`
}

// ScheduleList is GET /v1/schedules.
type ScheduleList struct {
	Items []backstop.ScheduleInfo `json:"items"`
}

// Params is the library's form of the request; a bad every names the field.
func (q ScheduleRequest) Params() (backstop.ScheduleParams, error) {
	p := q.ScheduleParams
	p.Every = 0
	if q.Every != "" {
		d, err := time.ParseDuration(q.Every)
		if err != nil || d <= 0 {
			return p, &apiError{code: codeInvalidInput, field: "every", detail: "every: want a positive duration such as 30s or 1h, got " + q.Every}
		}
		p.Every = d
	}
	return p, nil
}

// POST /v1/schedules
func (s *Server) postSchedule(w http.ResponseWriter, r *http.Request) error {
	var req ScheduleRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	p, err := req.Params()
	if err != nil {
		return err
	}
	in, err := s.c.AddSchedule(r.Context(), p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, in)
}

// GET /v1/schedules
func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request) error {
	items, err := s.c.Schedules(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, ScheduleList{Items: items})
}

// GET /v1/schedules/{name}
func (s *Server) getSchedule(w http.ResponseWriter, r *http.Request) error {
	in, err := s.c.Schedule(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, in)
}

// POST /v1/schedules/{name}/pause and /resume
func (s *Server) pauseSchedule(pause bool) apiFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		f := s.c.ResumeSchedule
		if pause {
			f = s.c.PauseSchedule
		}
		in, err := f(r.Context(), r.PathValue("name"))
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, in)
	}
}

// DELETE /v1/schedules/{name}
func (s *Server) deleteSchedule(w http.ResponseWriter, r *http.Request) error {
	if err := s.c.RemoveSchedule(r.Context(), r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
