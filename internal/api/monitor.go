package api

import (
	"context"
	_ "embed"
	"errors"
	"net/http"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
)

// Monitoring endpoints are pure methods returning structs (tests and an
// embedding program call them directly), wrapped by thin handlers.

// Health is GET /healthz: the process is up and serving.
type Health struct {
	Status string `json:"status"`
}

// Health reports that the process is up.
func (s *Server) Health() Health { return Health{Status: "ok"} }

func (s *Server) getHealth(w http.ResponseWriter, _ *http.Request) error {
	return writeJSON(w, http.StatusOK, s.Health())
}

// Readiness is GET /readyz: the store answers, can write, and its schema
// is current.
type Readiness struct {
	Ready bool `json:"ready"`
	// Store is "ok", "unreachable" (it does not answer) or "unavailable"
	// (it answers but cannot write now: Cause says why).
	Store string `json:"store"`
	// Cause: why the store cannot write (busy, disk full, connection
	// lost, ...; store.UnavailableError's causes), when Store is
	// "unavailable".
	Cause string `json:"cause,omitempty"`
	// PendingMigrations counts migrations not applied yet.
	PendingMigrations int `json:"pending_migrations"`
}

// Readiness checks the store (within 2s): its migrations, and a write
// (store.Ops.ProbeWrite: written and rolled back, nothing is left).
func (s *Server) Readiness(ctx context.Context) Readiness {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ms, err := s.c.Store().MigrationStatus(ctx)
	if err != nil {
		s.log.Warn("readyz: store unreachable", "error", err)
		return Readiness{Store: "unreachable"}
	}
	out := Readiness{Store: "ok"}
	for _, m := range ms {
		if m.AppliedAt == nil {
			out.PendingMigrations++
		}
	}
	if out.PendingMigrations > 0 {
		return out // the probe's table may not exist yet
	}
	if err := s.c.Store().ProbeWrite(ctx); err != nil {
		s.log.Warn("readyz: the store cannot write", "error", err)
		out.Store, out.Cause = "unavailable", "write failed"
		var ue *store.UnavailableError
		switch {
		case errors.As(err, &ue):
			out.Cause = ue.Cause
		case errors.Is(err, context.DeadlineExceeded) && parent.Err() == nil:
			out.Cause = store.CauseBusy // the write waited past the check's 2s
		}
		return out
	}
	out.Ready = true
	return out
}

func (s *Server) getReady(w http.ResponseWriter, r *http.Request) error {
	rd := s.Readiness(r.Context())
	status := http.StatusOK
	if !rd.Ready {
		status = http.StatusServiceUnavailable
	}
	return writeJSON(w, status, rd)
}

// QueueView is one queue with its task counts by state (every state
// present, zero included) and whether it is paused.
type QueueView = backstop.QueueSummary

// QueuesResponse is GET /v1/queues: every queue that holds tasks or is
// paused, by name.
type QueuesResponse struct {
	Items []QueueView `json:"items"`
}

// Queues counts tasks by queue and state.
func (s *Server) Queues(ctx context.Context) (QueuesResponse, error) {
	qs, err := s.c.Queues(ctx)
	if err != nil {
		return QueuesResponse{}, err
	}
	return QueuesResponse{Items: qs}, nil
}

func (s *Server) listQueues(w http.ResponseWriter, r *http.Request) error {
	q, err := s.Queues(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, q)
}

//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI is the API's OpenAPI 3.1 document.
func OpenAPI() []byte { return openAPIDoc }

func (s *Server) getOpenAPI(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(openAPIDoc)
	return nil
}
