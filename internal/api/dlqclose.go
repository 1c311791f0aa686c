package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
)

// CloseRequest is POST /v1/dlq/close: discard or resolve, a batch per call,
// the open dead letters matching a filter (the filter of a redrive). The
// console's "discard (resolve) all N matching" calls it again with the
// first answer's snapshot while more is true: stopping is cancelling,
// calling again is resuming.
type CloseRequest struct {
	Queue         string            `json:"queue,omitempty"`
	Kind          string            `json:"kind,omitempty"`
	Reason        bt.DeadReason     `json:"reason,omitempty"`
	ErrorContains string            `json:"error_contains,omitempty"`
	Attributes    map[string]string `json:"attributes,omitempty"`
	Since         *time.Time        `json:"since,omitempty"`
	Until         *time.Time        `json:"until,omitempty"`
	// Where: a CEL condition on the payload and attributes (docs/api.md).
	Where string `json:"where,omitempty"`
	// Status: discarded or resolved.
	Status bt.DLQStatus `json:"status"`
	// Why: the operator's reason (required to discard); Note: how a
	// resolved one was handled.
	Why  string `json:"why,omitempty"`
	Note string `json:"note,omitempty"`
	// Snapshot: the first call's answer; only dead letters that died by
	// then are closed.
	Snapshot *time.Time `json:"snapshot,omitempty"`
	// Limit: at most this many in this call (default 500, at most 5,000).
	Limit int `json:"limit,omitempty"`
	// All: nothing above selects, and every open dead letter is meant.
	// Without a selection and without all: 400 naming all.
	All bool `json:"all,omitempty"`
}

// POST /v1/dlq/close
func (s *Server) closeDLQ(w http.ResponseWriter, r *http.Request) error {
	var req CloseRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if req.Status != bt.DLQDiscarded && req.Status != bt.DLQResolved {
		return &apiError{code: codeInvalidInput, field: "status", detail: fmt.Sprintf("status: must be discarded or resolved, not %q", req.Status)}
	}
	f := backstop.ListParams{Queue: req.Queue, Kind: req.Kind, Reason: req.Reason, ErrorContains: req.ErrorContains,
		Attrs: req.Attributes, Where: req.Where}
	if req.Since != nil {
		f.Since = *req.Since
	}
	if req.Until != nil {
		f.Until = *req.Until
	}
	p := backstop.CloseMatchingParams{Filter: f, Status: req.Status, Reason: req.Why, Note: req.Note,
		Actor: principalFrom(r.Context()).Name, Limit: req.Limit, All: req.All}
	if req.Snapshot != nil {
		p.Snapshot = *req.Snapshot
	}
	res, err := s.c.CloseMatching(actorContext(r), p)
	if err != nil {
		return err
	}
	s.log.Info("dead letters closed", "actor", p.Actor, "status", req.Status, "closed", res.Closed, "skipped", res.Skipped, "more", res.More)
	return writeJSON(w, http.StatusOK, res)
}
