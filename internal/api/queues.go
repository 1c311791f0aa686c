package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/backstophq/backstop"
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

// QueuePauseRequest is the optional body of POST /v1/queues/{name}/pause
// and /resume.
type QueuePauseRequest struct {
	// Reason: why, recorded with the actor in the queue.paused or
	// queue.resumed event of the audit stream.
	Reason string `json:"reason,omitempty"`
}

// pauseContext reads the optional body and carries its reason.
func pauseContext(r *http.Request) (context.Context, error) {
	var req QueuePauseRequest
	if err := decodeOptional(r, &req); err != nil {
		return nil, err
	}
	if err := backstop.CheckReason("reason", req.Reason, false); err != nil {
		return nil, err
	}
	return backstop.WithReason(r.Context(), req.Reason), nil
}

// POST /v1/queues/{name}/pause
func (s *Server) pauseQueue(w http.ResponseWriter, r *http.Request) error {
	p := principalFrom(r.Context())
	ctx, err := pauseContext(r)
	if err != nil {
		return err
	}
	st, changed, err := s.c.PauseQueue(ctx, r.PathValue("name"), p.Name)
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
	ctx, err := pauseContext(r)
	if err != nil {
		return err
	}
	changed, err := s.c.ResumeQueue(ctx, name, p.Name)
	if err != nil {
		return err
	}
	s.log.Info("queue resume", "actor", p.Name, "queue", name, "changed", changed)
	return writeJSON(w, http.StatusOK, QueuePauseResponse{Name: name, Changed: changed})
}

// ActivityResponse is GET /v1/activity without window.
type ActivityResponse struct {
	Items []backstop.ActivityMinute `json:"items"`
}

// GET /v1/activity?minutes=N: per minute, the tasks that succeeded, the
// attempts that failed and the tasks that died (the overview's charts).
// GET /v1/activity?window=24h|7d[&queue=Q][&kind=K]: the activity
// rollup's history (backstop.ActivityReport).
func (s *Server) getActivity(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	for k := range q {
		if k != "minutes" && k != "window" && k != "queue" && k != "kind" {
			return fail(codeInvalidQuery, "unknown parameter "+strconv.Quote(k)+" (use minutes, or window with queue and kind)")
		}
	}
	// window: the rollup's history (24h, 7d) instead of the last minutes.
	if q.Has("window") {
		if q.Has("minutes") {
			return fail(codeInvalidQuery, "minutes and window: give one (minutes for the last minutes, window for 24h or 7d)")
		}
		rep, err := s.c.ActivityHistory(r.Context(), q.Get("window"), q.Get("queue"), q.Get("kind"))
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, rep)
	}
	if q.Has("queue") || q.Has("kind") {
		return fail(codeInvalidQuery, "queue and kind need window (24h or 7d): the per-minute counts are of every queue")
	}
	n := 0
	if v := q.Get("minutes"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			return fail(codeInvalidQuery, "minutes "+strconv.Quote(v)+": want a whole number between 1 and "+strconv.Itoa(backstop.MaxActivityMinutes))
		}
	}
	items, err := s.c.Activity(r.Context(), n)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, ActivityResponse{Items: items})
}
