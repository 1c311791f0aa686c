package api

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
)

// The worker registry: GET /v1/workers and GET /v1/workers/{id}. Remote
// workers are registered and kept seen by their claims and heartbeats
// (seeWorker), at most once per seenEvery per worker so the registry costs
// the worker protocol's hot path almost nothing.

// seenEvery is how often one remote worker's sightings are written.
const seenEvery = 5 * time.Second

// WorkerList is a page of workers.
type WorkerList struct {
	Items      []backstop.WorkerInfo `json:"items"`
	NextCursor *string               `json:"next_cursor"`
}

// WorkerDetail is GET /v1/workers/{id}: the worker and its most recent
// executions, newest first.
type WorkerDetail = backstop.WorkerDetail

// ParseWorkerQuery reads GET /v1/workers's query: queue, state, limit,
// after.
func ParseWorkerQuery(q url.Values) (backstop.WorkerListParams, error) {
	var p backstop.WorkerListParams
	for key, vals := range q {
		switch key {
		case "queue", "state", "limit", "after":
			if len(vals) != 1 {
				return p, fail(codeInvalidQuery, key+": give it once")
			}
		case "label":
		default:
			return p, fail(codeInvalidQuery, fmt.Sprintf("unknown parameter %q (use queue, state, label, limit, after)", key))
		}
	}
	for _, v := range q["label"] {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return p, fail(codeInvalidQuery, fmt.Sprintf("label %q: want key=value", v))
		}
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		if _, dup := p.Labels[k]; dup {
			return p, fail(codeInvalidQuery, fmt.Sprintf("label: key %q is given twice", k))
		}
		p.Labels[k] = val
	}
	p.Queue, p.State, p.AfterID = q.Get("queue"), backstop.WorkerState(q.Get("state")), q.Get("after")
	var err error
	p.Limit, err = positiveLimit(q, defaultListLimit)
	return p, err
}

// positiveLimit is the query's limit: def when absent, else a positive
// whole number (400 naming it).
func positiveLimit(q url.Values, def int) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fail(codeInvalidQuery, fmt.Sprintf("limit %q: want a positive whole number", v))
	}
	return n, nil
}

// GET /v1/workers
func (s *Server) listWorkers(w http.ResponseWriter, r *http.Request) error {
	p, err := ParseWorkerQuery(r.URL.Query())
	if err != nil {
		return err
	}
	ws, err := s.c.Workers(r.Context(), p)
	if err != nil {
		return err
	}
	out := WorkerList{Items: ws}
	if len(ws) == p.Limit && len(ws) > 0 {
		last := ws[len(ws)-1].ID
		out.NextCursor = &last
	}
	return writeJSON(w, http.StatusOK, out)
}

// GET /v1/workers/{id}
func (s *Server) getWorker(w http.ResponseWriter, r *http.Request) error {
	d, err := s.c.Worker(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	if d.Executions == nil {
		d.Executions = []bt.Execution{}
	}
	return writeJSON(w, http.StatusOK, d)
}

// WorkerExecutionList is GET /v1/workers/{id}/executions: a page of the
// worker's executions, newest first, and the cursor of the next page (null
// on the last).
type WorkerExecutionList struct {
	Items      []bt.Execution `json:"items"`
	NextCursor *string        `json:"next_cursor"`
}

// ParseWorkerExecutionsQuery reads GET /v1/workers/{id}/executions's
// query: limit, after, outcome.
func ParseWorkerExecutionsQuery(q url.Values) (backstop.WorkerExecutionParams, error) {
	var p backstop.WorkerExecutionParams
	for key, vals := range q {
		switch key {
		case "limit", "after", "outcome":
			if len(vals) != 1 {
				return p, fail(codeInvalidQuery, key+": give it once")
			}
		default:
			return p, fail(codeInvalidQuery, fmt.Sprintf("unknown parameter %q (use limit, after, outcome)", key))
		}
	}
	p.After, p.Outcome = q.Get("after"), bt.Outcome(q.Get("outcome"))
	var err error
	p.Limit, err = positiveLimit(q, p.Limit)
	return p, err
}

// GET /v1/workers/{id}/executions
func (s *Server) workerExecutions(w http.ResponseWriter, r *http.Request) error {
	p, err := ParseWorkerExecutionsQuery(r.URL.Query())
	if err != nil {
		return err
	}
	page, err := s.c.WorkerExecutions(r.Context(), r.PathValue("id"), p)
	if err != nil {
		return err
	}
	out := WorkerExecutionList{Items: page.Items}
	if page.Next != "" {
		out.NextCursor = &page.Next
	}
	return writeJSON(w, http.StatusOK, out)
}

// seenWorkers remembers when each remote worker's sighting was last
// written.
type seenWorkers struct{ m sync.Map } // worker id → time.Time

// seeWorker records a remote worker's claim or heartbeat (throttled). A
// failure is logged, never returned: the registry must not fail work.
func (s *Server) seeWorker(r *http.Request, id string, queues []string) {
	if id == "" {
		return
	}
	now := time.Now()
	if last, ok := s.seen.m.Load(id); ok && now.Sub(last.(time.Time)) < seenEvery {
		return
	}
	s.seen.m.Store(id, now)
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if err := s.rp.SeeWorker(r.Context(), id, host, queues); err != nil {
		s.seen.m.Delete(id)
		s.log.Warn("worker registry: recording a remote worker failed", "worker_id", id, "error", err)
	}
}

// The worker protocol's registry calls: a remote worker registers as it
// starts (POST /v1/workers), says it is alive every heartbeat_interval
// (POST /v1/workers/{id}/heartbeat, draining: true once it drains) and
// that it stopped (POST /v1/workers/{id}/stop), so the registry shows its
// host, pid, a fresh last_seen and stopped, and the log its worker.*
// events (docs/events.md).

// RegisterWorkerRequest is POST /v1/workers.
type RegisterWorkerRequest struct {
	ID      string            `json:"id"`
	Host    string            `json:"host"`
	PID     int               `json:"pid"`
	Queues  []string          `json:"queues"`
	Version string            `json:"version,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// WorkerRegistration answers POST /v1/workers: the registered worker and
// how often it should heartbeat (a quarter of the server's stale TTL).
type WorkerRegistration struct {
	backstop.WorkerInfo
	HeartbeatInterval bt.Duration `json:"heartbeat_interval"`
}

// WorkerHeartbeatRequest is POST /v1/workers/{id}/heartbeat (body
// optional).
type WorkerHeartbeatRequest struct {
	// Draining says the worker stopped claiming and finishes what it
	// runs: state stopping.
	Draining bool `json:"draining,omitempty"`
}

// POST /v1/workers
func (s *Server) registerWorker(w http.ResponseWriter, r *http.Request) error {
	var req RegisterWorkerRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	info, err := s.rp.RegisterWorker(actorContext(r), backstop.WorkerInfo{ID: req.ID, Host: req.Host, PID: req.PID,
		Queues: req.Queues, Version: req.Version, Labels: req.Labels})
	if err != nil {
		return err
	}
	s.seen.m.Store(info.ID, time.Now())
	return writeJSON(w, http.StatusCreated, WorkerRegistration{WorkerInfo: *info, HeartbeatInterval: bt.Duration(s.c.WorkerHeartbeatInterval())})
}

// POST /v1/workers/{id}/heartbeat
func (s *Server) workerHeartbeat(w http.ResponseWriter, r *http.Request) error {
	var req WorkerHeartbeatRequest
	if err := decodeOptional(r, &req); err != nil {
		return err
	}
	info, err := s.rp.WorkerHeartbeat(actorContext(r), r.PathValue("id"), req.Draining)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, info)
}

// POST /v1/workers/{id}/stop
func (s *Server) stopWorker(w http.ResponseWriter, r *http.Request) error {
	if err := decodeOptional(r, &struct{}{}); err != nil {
		return err
	}
	info, err := s.rp.StopWorker(actorContext(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	s.seen.m.Delete(info.ID)
	return writeJSON(w, http.StatusOK, info)
}
