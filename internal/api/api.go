// Package api is Backstop's HTTP API, served by `backstop serve`: JSON under
// /v1, errors as application/problem+json with stable codes (problem.go),
// bearer tokens with roles (auth.go), and the remote worker protocol.
//
// Each endpoint is a typed request/response pair on a net/http ServeMux
// pattern, and every handler is thin: it decodes, authorises and calls the
// library (backstop.Client), which holds every rule. This package must never
// decide policy of its own (validation, retries, dead-lettering) and never
// talk to a store except for tokens and reads the library does not offer.
package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/remote"
	"github.com/backstophq/backstop/redact"
	"github.com/backstophq/backstop/store"
)

// Options configures a Server. Zero values take the default named at the
// end of each field's comment.
type Options struct {
	// Client is the library the API serves. Required; its store must also
	// implement store.Tokens and store.APIStore (both drivers do).
	Client *backstop.Client
	// Logger for request and error logs. Default: slog.Default().
	Logger *slog.Logger
	// AnonymousAdmin lets requests without a token in as admin (`serve
	// --dev`, loopback only; the caller enforces that). Default: false.
	AnonymousAdmin bool
	// MaxBodyBytes bounds a request body; larger gets 413. Default: 10 MiB.
	MaxBodyBytes int64
	// ListMaxBytes bounds the body of a task list response (listpage.go):
	// a page stops before the item that would pass it, with next_cursor,
	// and holds at least one item. Default: DefaultListMaxBytes (4 MiB).
	ListMaxBytes int
	// RateLimit is each token's sustained requests per second; negative
	// disables. The worker protocol's claims and log appends spend a
	// budget of their own (the same rate and burst), and heartbeats and
	// settlements none (auth.go, budgetOf). Default: 1000.
	RateLimit float64
	// RateBurst is each token's burst. Default: 2×RateLimit.
	RateBurst int
	// MaxWait bounds a claim's long-poll wait. Default: 30s.
	MaxWait time.Duration
	// PollInterval: a waiting claim retries this often even without a
	// wake-up (the fallback, as for in-process workers). Default: 1s.
	PollInterval time.Duration
	// Metrics, when set, is served unauthenticated at GET /metrics.
	Metrics http.Handler
	// SessionTTL is how long a web console session lasts (session.go).
	// Default: DefaultSessionTTL.
	SessionTTL time.Duration
	// LoopbackOnly: the server listens on loopback addresses only, so a
	// request's Host must be a loopback name (localhost, 127.0.0.1, [::1],
	// any port) or one of AllowedHosts; any other is refused with 421
	// (guard.go: no DNS rebinding). `serve` sets it from its address.
	// Default: false.
	LoopbackOnly bool
	// AllowedHosts are host names (no port) the server answers to besides
	// loopback ones when LoopbackOnly, and whose origins may write (a proxy
	// in front of the server). Default: none.
	AllowedHosts []string
}

// Server is the HTTP API. It is an http.Handler; Close stops its wake-up
// listener.
type Server struct {
	opts   Options
	c      *backstop.Client
	rp     *remote.Server // the remote worker protocol over c's engine
	log    *slog.Logger
	tokens store.Tokens
	reads  store.APIStore
	mux    *http.ServeMux
	routes []Route
	limit  *limiters
	waker  *waker
	quit   chan struct{} // closed by Close: waiting claims return at once
	// claimWaiting, set only by tests (export_test.go), is called each
	// time a long-poll claim found nothing and starts to wait.
	claimWaiting atomic.Pointer[func()]
	// stops: the named claims this server holds, and the stops that came
	// before their claim (claimstop.go).
	stops claimStops
	// redrives runs the DLQ redrives started over the API (redrive.go).
	redrives *redrives
	closed   sync.Once

	touched    sync.Map       // token id → time.Time of the last recorded use
	seen       seenWorkers    // remote workers' last recorded sighting (workers.go)
	mask       *redact.Masker // payload masking (redaction.go)
	tokenCache tokenCache     // tokens by hash, reused for TokenCacheTTL (tokencache.go)
	sessions   sessions       // web console sessions (session.go)
}

// Route is one endpoint: its method, path pattern and the least role that
// may call it.
type Route struct {
	Method string
	Path   string
	Role   Role
}

// New builds the API over opts.Client.
func New(opts Options) (*Server, error) {
	if opts.Client == nil {
		return nil, errors.New("api: Options.Client is required")
	}
	st := opts.Client.Store()
	tokens, ok1 := st.(store.Tokens)
	reads, ok2 := st.(store.APIStore)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("api: the %s store does not support tokens and API reads", st.Driver())
	}
	opts.Logger = cmp.Or(opts.Logger, slog.Default())
	opts.MaxBodyBytes = cmp.Or(opts.MaxBodyBytes, 10<<20)
	opts.ListMaxBytes = cmp.Or(opts.ListMaxBytes, DefaultListMaxBytes)
	opts.RateLimit = cmp.Or(opts.RateLimit, 1000)
	opts.RateBurst = cmp.Or(opts.RateBurst, max(int(2*opts.RateLimit), 1))
	opts.MaxWait = cmp.Or(opts.MaxWait, 30*time.Second)
	opts.PollInterval = cmp.Or(opts.PollInterval, time.Second)
	opts.SessionTTL = cmp.Or(opts.SessionTTL, DefaultSessionTTL)
	s := &Server{
		opts: opts, c: opts.Client, rp: remote.New(opts.Client.Engine()), log: opts.Logger, tokens: tokens, reads: reads,
		mux:   http.NewServeMux(),
		limit: &limiters{limit: rate.Limit(opts.RateLimit), burst: opts.RateBurst, m: map[string]*rate.Limiter{}},
		waker: newWaker(st),
		quit:  make(chan struct{}),

		redrives: newRedrives(),
		mask:     opts.Client.Masker(),
	}
	s.register()
	if opts.Metrics != nil {
		s.mux.Handle("GET /metrics", opts.Metrics)
	}
	return s, nil
}

// Close ends waiting claims (they answer with no tasks), interrupts the
// running redrives (durable: the same redrive again resumes them) and waits
// for them, and stops the wake-up listener. Register it with
// http.Server.RegisterOnShutdown so a graceful shutdown does not wait for
// long polls. Safe to call twice.
func (s *Server) Close() {
	s.closed.Do(func() {
		close(s.quit)
		s.redrives.close()
		s.waker.close()
	})
}

// Routes lists every endpoint (the OpenAPI test checks each is documented).
func (s *Server) Routes() []Route { return append([]Route(nil), s.routes...) }

// HTTPServer wraps the API in an http.Server with the timeouts a public
// listener needs; the write timeout leaves room for the longest claim wait.
func (s *Server) HTTPServer(addr string) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           s,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      s.opts.MaxWait + 60*time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

func (s *Server) now() time.Time { return s.c.Config().Clock.Now() }

// apiFunc is a handler that returns its error for writeProblem.
type apiFunc func(w http.ResponseWriter, r *http.Request) error

func (s *Server) handle(method, path string, role Role, fn apiFunc) {
	s.routes = append(s.routes, Route{Method: method, Path: path, Role: role})
	s.mux.Handle(method+" "+path, s.wrap(method, path, role, fn))
}

func (s *Server) register() {
	s.handle("GET", "/healthz", RoleNone, s.getHealth)
	s.handle("GET", "/readyz", RoleNone, s.getReady)
	s.handle("GET", "/v1/openapi.json", RoleNone, s.getOpenAPI)

	s.handle("POST", "/v1/tasks", RoleOperator, s.postTask)
	s.handle("POST", "/v1/tasks/batch", RoleOperator, s.postTaskBatch)
	s.handle("POST", "/v1/messages", RoleOperator, s.postMessage)
	s.handle("GET", "/v1/tasks", RoleViewer, s.listTasks)
	s.handle("GET", "/v1/tasks/{id}", RoleViewer, s.getTask)
	s.handle("POST", "/v1/tasks/{id}/cancel", RoleOperator, s.cancelTask)
	s.handle("POST", "/v1/tasks/bulk", RoleAdmin, s.taskJob) // taskjobs.go
	s.handle("GET", "/v1/queues", RoleViewer, s.listQueues)
	s.handle("POST", "/v1/queues/{name}/pause", RoleOperator, s.pauseQueue)
	s.handle("POST", "/v1/queues/{name}/resume", RoleOperator, s.resumeQueue)
	s.handle("GET", "/v1/schedules", RoleViewer, s.listSchedules)
	s.handle("POST", "/v1/schedules", RoleAdmin, s.postSchedule)
	s.handle("GET", "/v1/schedules/{name}", RoleViewer, s.getSchedule)
	s.handle("POST", "/v1/schedules/{name}/pause", RoleOperator, s.pauseSchedule(true))
	s.handle("POST", "/v1/schedules/{name}/resume", RoleOperator, s.pauseSchedule(false))
	s.handle("DELETE", "/v1/schedules/{name}", RoleAdmin, s.deleteSchedule)
	s.handle("GET", "/v1/limits", RoleViewer, s.listLimits)              // limits.go
	s.handle("PUT", "/v1/limits/{name}", RoleOperator, s.setLimit)       // limits.go
	s.handle("DELETE", "/v1/limits/{name}", RoleOperator, s.removeLimit) // limits.go

	// fair.go
	s.handle("GET", "/v1/fair-queues", RoleViewer, s.listFair)
	s.handle("PUT", "/v1/queues/{name}/fair", RoleOperator, s.setFair)
	s.handle("DELETE", "/v1/queues/{name}/fair", RoleOperator, s.removeFair)

	s.handle("GET", "/v1/activity", RoleViewer, s.getActivity)
	s.handle("GET", "/v1/counts", RoleViewer, s.getCounts)
	s.handle("GET", "/v1/relay", RoleViewer, s.getRelay) // relay.go
	s.handle("GET", "/v1/ordering", RoleViewer, s.listOrderedQueues)
	s.handle("GET", "/v1/ordering/{queue}/keys", RoleViewer, s.listOrderingKeys)

	s.handle("GET", "/v1/dlq", RoleViewer, s.listDLQ)
	s.handle("GET", "/v1/dlq/export", RoleViewer, s.exportDLQ)
	s.handle("GET", "/v1/dlq/groups", RoleViewer, s.groupDLQ)
	s.handle("GET", "/v1/dlq/{id}", RoleViewer, s.getDeadLetter)
	s.handle("POST", "/v1/dlq/{id}/replay", RoleAdmin, s.replayDeadLetter)
	s.handle("POST", "/v1/dlq/{id}/replay/preview", RoleAdmin, s.previewReplay)
	s.handle("POST", "/v1/dlq/{id}/discard", RoleAdmin, s.discardDeadLetter)
	s.handle("POST", "/v1/dlq/{id}/resolve", RoleAdmin, s.resolveDeadLetter)
	s.handle("POST", "/v1/dlq/redrive", RoleAdmin, s.redriveDLQ)
	s.handle("GET", "/v1/redrives/{id}", RoleViewer, s.getRedrive)
	s.handle("POST", "/v1/redrives/{id}/cancel", RoleAdmin, s.cancelRedrive)
	s.handle("GET", "/v1/redrives", RoleViewer, s.listRedrives)
	s.handle("GET", "/v1/redrives/{id}/items", RoleViewer, s.redriveItems)
	s.handle("POST", "/v1/redrives/{id}/resume", RoleAdmin, s.resumeRedrive)
	s.handle("POST", "/v1/dlq/purge", RoleAdmin, s.purgeDLQ)
	s.handle("POST", "/v1/dlq/close", RoleAdmin, s.closeDLQ)

	s.handle("POST", "/v1/workflows", RoleAdmin, s.applyWorkflow)
	s.handle("GET", "/v1/workflows", RoleViewer, s.listWorkflows)
	s.handle("GET", "/v1/workflows/{name}", RoleViewer, s.getWorkflow)
	s.handle("POST", "/v1/workflows/{name}/runs", RoleOperator, s.startRun)
	s.handle("GET", "/v1/runs", RoleViewer, s.listRuns)
	s.handle("POST", "/v1/runs/batch", RoleOperator, s.startRunBatch)
	s.handle("POST", "/v1/runs/{run_id}/cancel", RoleOperator, s.cancelRun)
	s.handle("POST", "/v1/runs/{run_id}/steps/{step}/complete", RoleAdmin, s.completeStep)
	s.handle("GET", "/v1/runs/{run_id}", RoleViewer, s.getRun)
	s.handle("GET", "/v1/runs/{run_id}/tasks", RoleViewer, s.listRunTasks)

	s.handle("GET", "/v1/workers", RoleViewer, s.listWorkers)
	s.handle("GET", "/v1/workers/{id}", RoleViewer, s.getWorker)
	s.handle("GET", "/v1/workers/{id}/executions", RoleViewer, s.workerExecutions)
	s.handle("POST", "/v1/workers", RoleOperator, s.registerWorker)
	s.handle("POST", "/v1/workers/{id}/heartbeat", RoleOperator, s.workerHeartbeat)
	s.handle("POST", "/v1/workers/{id}/stop", RoleOperator, s.stopWorker)

	s.handle("GET", "/v1/events", RoleViewer, s.listEvents)
	s.handle("GET", "/v1/events/stream", RoleViewer, s.streamEvents)
	s.handle("GET", "/v1/audit", RoleViewer, s.listAudit)

	s.handle("POST", "/v1/claim", RoleOperator, s.claim)
	s.handle("POST", "/v1/claims/{claim_id}/stop", RoleOperator, s.stopClaim)
	s.handle("POST", "/v1/tasks/{id}/heartbeat", RoleOperator, s.heartbeat)
	s.handle("POST", "/v1/tasks/{id}/progress", RoleOperator, s.progress)
	s.handle("POST", "/v1/tasks/{id}/complete", RoleOperator, s.complete)
	s.handle("POST", "/v1/tasks/{id}/fail", RoleOperator, s.fail)
	s.handle("POST", "/v1/tasks/{id}/logs", RoleOperator, s.appendLogs)
	s.handle("POST", "/v1/tasks/{id}/release", RoleOperator, s.release)
	s.handle("POST", "/v1/tasks/complete", RoleOperator, s.completeBatch)
	s.handle("GET", "/v1/tasks/{id}/executions/{execution_id}/logs", RoleViewer, s.readLogs)
}

// ServeHTTP implements http.Handler. Requests that match no route get a
// problem document (404, or 405 with Allow) instead of ServeMux's text.
// Every request passes the guard first (guard.go: host, origin, content
// type).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, pat := s.mux.Handler(r)
	if !s.admitted(w, r, pat) {
		return
	}
	if pat != "" {
		s.mux.ServeHTTP(w, r)
		return
	}
	var allow []string
	for _, m := range []string{"GET", "POST"} {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pat := s.mux.Handler(probe); pat != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		s.writeProblem(w, r, fail(codeMethodNotAllowed, r.Method+" is not allowed here"))
		return
	}
	s.writeProblem(w, r, fail(codeNoRoute, "no endpoint "+r.URL.Path))
}

// statusWriter remembers the status for the request log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (flushes and
// deadlines of event streams).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// wrap is the middleware chain every route gets, in order: recover, body
// limit, authentication, rate limit, role check, the handler, the log line.
func (s *Server) wrap(method, path string, role Role, fn apiFunc) http.Handler {
	mutating := method != "GET"
	budget := budgetOf(method, path)
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		start := time.Now()
		w := &statusWriter{ResponseWriter: rw}
		var who principal
		defer func() {
			if rec := recover(); rec != nil {
				if rec == http.ErrAbortHandler {
					panic(rec)
				}
				s.log.Error("api: handler panic", "method", method, "path", r.URL.Path, "panic", rec, "stack", string(debug.Stack()))
				if w.status == 0 {
					s.writeProblem(w, r, fmt.Errorf("panic: %v", rec))
				}
			}
			lvl := slog.LevelDebug
			if mutating || w.status >= 500 {
				lvl = slog.LevelInfo
			}
			s.log.Log(r.Context(), lvl, "api call", "actor", who.Name, "role", who.Role.String(),
				"method", method, "route", path, "path", r.URL.Path, "status", w.status,
				"duration", time.Since(start))
		}()
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
		}
		if role != RoleNone {
			p, err := s.authenticate(r)
			if err != nil {
				s.writeProblem(w, r, err)
				return
			}
			who = p
			key := p.TokenID
			if key == "" {
				key = "anonymous"
			}
			if ok, wait := s.limit.allow(key, budget); !ok {
				w.Header().Set("Retry-After", retryAfter(wait))
				s.writeProblem(w, r, fail(codeRateLimited, "slow down"))
				return
			}
			if p.Role < role {
				s.writeProblem(w, r, fail(codeForbidden, fmt.Sprintf("%s %s needs the %s role; token %q is %s", method, path, role, p.Name, p.Role)))
				return
			}
			if p, err = s.payloadMode(r, p); err != nil {
				s.writeProblem(w, r, err)
				return
			}
			who = p
			r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
		}
		// One where budget for the whole request (a listing reads in chunks).
		r = r.WithContext(s.c.WithWhereBudget(r.Context()))
		if err := fn(w, r); err != nil {
			if w.status != 0 {
				s.log.Warn("api: error after the response started", "path", r.URL.Path, "error", err)
				s.auditRaw(r, who) // part of the stream went out
				return
			}
			s.writeProblem(w, r, err)
			return
		}
		s.auditRaw(r, who)
	})
}
