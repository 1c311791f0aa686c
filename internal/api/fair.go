package api

import (
	"fmt"
	"net/http"

	"github.com/backstophq/backstop"
)

// Fair queues are the library's (fair.go at the root): the API reads and
// sets them; the claim applies them.

// FairQueuesResponse is GET /v1/fair-queues: every fair queue, by name,
// with its pending tasks by value of its attribute.
type FairQueuesResponse struct {
	Items []backstop.FairQueueStatus `json:"items"`
}

// FairRequest is the body of PUT /v1/queues/{name}/fair.
type FairRequest struct {
	By      string         `json:"by"`
	Weights map[string]int `json:"weights,omitempty"`
	// Reason: why, recorded with the actor in the queue.fair_set event.
	Reason string `json:"reason,omitempty"`
}

// FairRemoveRequest is the optional body of DELETE
// /v1/queues/{name}/fair.
type FairRemoveRequest struct {
	// Reason: why, recorded with the actor in the queue.fair_removed
	// event.
	Reason string `json:"reason,omitempty"`
}

// FairRemoveResponse is DELETE /v1/queues/{name}/fair.
type FairRemoveResponse struct {
	Queue   string `json:"queue"`
	Removed bool   `json:"removed"`
}

// GET /v1/fair-queues
func (s *Server) listFair(w http.ResponseWriter, r *http.Request) error {
	fs, err := s.c.FairQueueStatuses(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, FairQueuesResponse{Items: fs})
}

// PUT /v1/queues/{name}/fair: make the queue fair, or replace its
// attribute and weights.
func (s *Server) setFair(w http.ResponseWriter, r *http.Request) error {
	var req FairRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if err := backstop.CheckReason("reason", req.Reason, false); err != nil {
		return err
	}
	p := principalFrom(r.Context())
	f, err := s.c.SetFair(backstop.WithReason(r.Context(), req.Reason),
		backstop.FairQueue{Queue: r.PathValue("name"), By: req.By, Weights: req.Weights}, p.Name)
	if err != nil {
		return err
	}
	s.log.Info("queue fair", "actor", p.Name, "queue", f.Queue, "by", f.By)
	return writeJSON(w, http.StatusOK, f)
}

// DELETE /v1/queues/{name}/fair: fairness off (an optional body gives the
// reason).
func (s *Server) removeFair(w http.ResponseWriter, r *http.Request) error {
	var req FairRemoveRequest
	if err := decodeOptional(r, &req); err != nil {
		return err
	}
	if err := backstop.CheckReason("reason", req.Reason, false); err != nil {
		return err
	}
	p := principalFrom(r.Context())
	name := r.PathValue("name")
	removed, err := s.c.RemoveFair(backstop.WithReason(r.Context(), req.Reason), name, p.Name)
	if err != nil {
		return err
	}
	if !removed {
		return fail(codeNotFound, fmt.Sprintf("queue %q is not fair", name))
	}
	s.log.Info("queue fairness off", "actor", p.Name, "queue", name)
	return writeJSON(w, http.StatusOK, FairRemoveResponse{Queue: name, Removed: true})
}
