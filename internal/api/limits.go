package api

import (
	"fmt"
	"net/http"

	"github.com/backstophq/backstop"
)

// Limits are the library's (limits.go at the root): the API reads and sets
// them; the claim enforces them.

// LimitsResponse is GET /v1/limits: every limit with its use, by name.
type LimitsResponse struct {
	Items []backstop.LimitStatus `json:"items"`
}

// LimitRequest is the body of PUT /v1/limits/{name}.
type LimitRequest struct {
	Queue string `json:"queue"`
	Kind  string `json:"kind,omitempty"`
	Per   string `json:"per,omitempty"`
	// Concurrency or Rate (starts per second, with bursts of Burst:
	// default max(1, ceil(Rate))): one of them.
	Concurrency int     `json:"concurrency,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	Burst       int     `json:"burst,omitempty"`
	// Reason: why, recorded with the actor in the limit.set event.
	Reason string `json:"reason,omitempty"`
}

// LimitRemoveResponse is DELETE /v1/limits/{name}.
type LimitRemoveResponse struct {
	Name    string `json:"name"`
	Removed bool   `json:"removed"`
}

// GET /v1/limits
func (s *Server) listLimits(w http.ResponseWriter, r *http.Request) error {
	ls, err := s.c.Limits(r.Context())
	if err != nil {
		return err
	}
	if ls == nil {
		ls = []backstop.LimitStatus{}
	}
	return writeJSON(w, http.StatusOK, LimitsResponse{Items: ls})
}

// PUT /v1/limits/{name}: create or replace.
func (s *Server) setLimit(w http.ResponseWriter, r *http.Request) error {
	var req LimitRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if err := backstop.CheckReason("reason", req.Reason, false); err != nil {
		return err
	}
	p := principalFrom(r.Context())
	l, err := s.c.SetLimit(backstop.WithReason(r.Context(), req.Reason), backstop.Limit{Name: r.PathValue("name"),
		Queue: req.Queue, Kind: req.Kind, Per: req.Per, Concurrency: req.Concurrency, Rate: req.Rate, Burst: req.Burst}, p.Name)
	if err != nil {
		return err
	}
	s.log.Info("limit set", "actor", p.Name, "limit", l.Name, "concurrency", l.Concurrency, "rate", l.Rate, "burst", l.Burst)
	return writeJSON(w, http.StatusOK, l)
}

// DELETE /v1/limits/{name}
func (s *Server) removeLimit(w http.ResponseWriter, r *http.Request) error {
	p := principalFrom(r.Context())
	name := r.PathValue("name")
	removed, err := s.c.RemoveLimit(r.Context(), name, p.Name)
	if err != nil {
		return err
	}
	if !removed {
		return fail(codeNotFound, fmt.Sprintf("no limit named %q", name))
	}
	s.log.Info("limit removed", "actor", p.Name, "limit", name)
	return writeJSON(w, http.StatusOK, LimitRemoveResponse{Name: name, Removed: true})
}
