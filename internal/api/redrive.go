package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
)

// A redrive can take long (millions of dead letters, a rate limit), longer
// than a request should. POST /v1/dlq/redrive starts it in the server, in
// the background, and answers 202 with its id and first progress once the
// library has recorded it (or 200 when it finished within the request's
// `wait`); GET /v1/redrives/{id} reports its progress. The redrive is
// durable in the store: if the server stops, the same POST again resumes it
// where it stopped (the library decides what "the same" is).

// MaxRedriveWait bounds how long POST /v1/dlq/redrive waits for the
// redrive to finish before answering 202.
const MaxRedriveWait = 30 * time.Second

// maxRedriveRecords bounds the redrives a server remembers; beyond it the
// finished ones are forgotten.
const maxRedriveRecords = 1000

// maxRedriveSample bounds a dry run's sample.
const maxRedriveSample = 100

// RedriveRequest is POST /v1/dlq/redrive: the dead-letter filters (open
// dead letters only), the pace, and what to do to each, as for a replay.
type RedriveRequest struct {
	Queue         string            `json:"queue,omitempty"`
	Kind          string            `json:"kind,omitempty"`
	Reason        bt.DeadReason     `json:"reason,omitempty"`
	ErrorContains string            `json:"error_contains,omitempty"`
	Attributes    map[string]string `json:"attributes,omitempty"`
	Since         *time.Time        `json:"since,omitempty"`
	Until         *time.Time        `json:"until,omitempty"`
	// Where: a CEL condition on the payload and attributes (docs/api.md):
	// in the database for its SQL subset, otherwise in Go over the other
	// filters' dead letters.
	Where string `json:"where,omitempty"`
	// Workflow, RunID, Step select workflow steps' dead tasks (the
	// attributes workflow, run_id, step_id: backstop.StepSelection),
	// checked against the workflow registry; redriving a halted run's dead
	// step resumes the run.
	Workflow string `json:"workflow,omitempty"`
	RunID    string `json:"run_id,omitempty"`
	Step     string `json:"step,omitempty"`
	// All: nothing above selects, and every open dead letter is meant.
	// Without a selection and without all: 400 naming all (a dry run needs
	// none).
	All bool `json:"all,omitempty"`
	// Rate: replays per second (0: unthrottled). Limit: at most this many
	// in this run (0: all); the same redrive again continues.
	Rate  float64 `json:"rate,omitempty"`
	Limit int     `json:"limit,omitempty"`
	PatchRequest
	// Why: the operator's reason for the redrive, recorded with the actor
	// in each replay's events and on the redrive's record (Reason above
	// filters by the dead letters' reason). At most 1 KiB; required when the
	// server's dlq.require_reason is on.
	Why string `json:"why,omitempty"`
	// Wait: answer when the redrive finished or after this long (at most
	// 30s), whichever comes first. Default 0: answer once it started.
	Wait bt.Duration `json:"wait,omitempty"`
	// DryRun changes nothing (no redrive record, no event) and answers 200
	// with status "dry_run" and a preview: how many match now, a sample
	// (Sample of them, default 5, at most 100) and, with a patch, each
	// sampled payload's before/after (masked) with the changed paths.
	DryRun bool `json:"dry_run,omitempty"`
	Sample int  `json:"sample,omitempty"`
}

// RedriveStatus is a redrive this server runs or ran.
type RedriveStatus struct {
	backstop.RedriveProgress
	// Status: running; done (nothing left); empty (nothing matched when
	// it started: nothing was replayed, nothing to resume); stopped (its limit reached; the
	// same redrive again continues); canceled (POST
	// /v1/redrives/{id}/cancel; the same redrive again resumes);
	// interrupted (the server stopped it; the same redrive again resumes);
	// over_budget (a batch's where, evaluated in Go, spent the server's
	// limits.where_cost or limits.where_time: Error names it; the same
	// redrive again resumes); failed (Error says why); dry_run (RedriveRequest.DryRun: nothing
	// was changed; Preview holds the count and the sample).
	Status     string     `json:"status"`
	Error      string     `json:"error,omitempty"`
	Actor      string     `json:"actor"`
	Why        string     `json:"why,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// From the redrive's durable record (GET /v1/redrives/{id}): its items
	// counted by outcome (replayed, conflict, unprocessable, not_open), its
	// filter and patch (masked) and its cursor.
	Outcomes map[string]int  `json:"outcomes,omitempty"`
	Filter   json.RawMessage `json:"filter,omitempty"`
	Cursor   string          `json:"cursor,omitempty"`
	// From the record too: the process running it (runner, "" when none),
	// when a runner was last seen, whether one is alive (a resume without
	// force is refused, 409) and whether it can be resumed.
	Runner      string     `json:"runner,omitempty"`
	HeartbeatAt *time.Time `json:"heartbeat_at,omitempty"`
	RunnerAlive bool       `json:"runner_alive"`
	Resumable   bool       `json:"resumable"`
}

type redriveRun struct {
	mu       sync.Mutex
	st       RedriveStatus
	done     chan struct{}
	cancel   context.CancelFunc // stops the run (POST /v1/redrives/{id}/cancel)
	canceled bool               // by that request
}

func (r *redriveRun) status() RedriveStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.st
	return st
}

// redrives tracks the background redrives of one server.
type redrives struct {
	ctx    context.Context // ends at Server.Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	m      map[string]*redriveRun
}

func newRedrives() *redrives {
	ctx, cancel := context.WithCancel(context.Background())
	return &redrives{ctx: ctx, cancel: cancel, m: map[string]*redriveRun{}}
}

// close interrupts the running redrives and waits for them.
func (rs *redrives) close() {
	rs.cancel()
	rs.wg.Wait()
}

// start runs the redrive in the background and returns it once the library
// recorded it, or the error that refused it.
func (rs *redrives) start(c *backstop.Client, p backstop.RedriveParams, now func() time.Time) (*redriveRun, error) {
	return rs.startWith(func(ctx context.Context, progress func(backstop.RedriveProgress)) (backstop.RedriveProgress, error) {
		return c.Redrive(ctx, p, progress)
	}, p, now)
}

// startWith runs do (a redrive or a resumed one) as start does.
func (rs *redrives) startWith(do func(context.Context, func(backstop.RedriveProgress)) (backstop.RedriveProgress, error),
	p backstop.RedriveParams, now func() time.Time) (*redriveRun, error) {
	ctx, cancel := context.WithCancel(rs.ctx)
	type first struct {
		run *redriveRun
		err error
	}
	firstCh := make(chan first, 1)
	var run *redriveRun
	rs.wg.Add(1)
	go func() {
		defer rs.wg.Done()
		defer cancel()
		prog, err := do(ctx, func(pr backstop.RedriveProgress) {
			if run != nil {
				run.mu.Lock()
				run.st.RedriveProgress = pr
				run.mu.Unlock()
				return
			}
			rs.mu.Lock()
			defer rs.mu.Unlock()
			if cur := rs.m[pr.RedriveID]; cur != nil && cur.status().Status == "running" {
				// The same redrive is running here already: leave it be.
				cancel()
				firstCh <- first{run: cur}
				return
			}
			if len(rs.m) >= maxRedriveRecords {
				for id, r := range rs.m { // forget finished ones first
					if r.status().Status != "running" {
						delete(rs.m, id)
					}
				}
			}
			run = &redriveRun{done: make(chan struct{}), cancel: cancel, st: RedriveStatus{RedriveProgress: pr, Status: "running",
				Actor: p.Actor, Why: p.Reason, StartedAt: now()}}
			rs.m[pr.RedriveID] = run
			firstCh <- first{run: run}
		})
		if run == nil {
			if err == nil {
				err = errors.New("redrive: no progress reported")
			}
			select {
			case firstCh <- first{err: err}:
			default: // a duplicate: its first answer was sent
			}
			return
		}
		run.mu.Lock()
		defer close(run.done)
		defer run.mu.Unlock()
		if prog.RedriveID != "" {
			run.st.RedriveProgress = prog
		}
		at := now()
		run.st.FinishedAt = &at
		switch {
		case err == nil && prog.Empty:
			run.st.Status = backstop.RedriveEmpty
		case err == nil && prog.Done:
			run.st.Status = "done"
		case err == nil:
			run.st.Status = "stopped"
		case run.canceled || errors.Is(err, backstop.ErrRedriveCanceled):
			run.st.Status = "canceled"
		case errors.Is(err, backstop.ErrInterrupted):
			run.st.Status, run.st.Error = "interrupted", err.Error()
		case errors.Is(err, backstop.ErrWhereBudget):
			run.st.Status, run.st.Error = "over_budget", err.Error()
		default:
			run.st.Status, run.st.Error = "failed", err.Error()
		}
	}()
	f := <-firstCh
	return f.run, f.err
}

func (rs *redrives) get(id string) *redriveRun {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.m[id]
}

// POST /v1/dlq/redrive
func (s *Server) redriveDLQ(w http.ResponseWriter, r *http.Request) error {
	var req RedriveRequest
	if err := decodeOptional(r, &req); err != nil {
		return err
	}
	wait := time.Duration(req.Wait)
	if wait < 0 || wait > MaxRedriveWait {
		return &apiError{code: codeInvalidInput, field: "wait", detail: fmt.Sprintf("wait: must be between 0s and %s", MaxRedriveWait)}
	}
	ops, err := req.ops()
	if err != nil {
		return err
	}
	if err := s.c.CheckReason("why", req.Why); err != nil {
		return err
	}
	p := principalFrom(r.Context())
	f := backstop.ListParams{Queue: req.Queue, Kind: req.Kind, Reason: req.Reason, ErrorContains: req.ErrorContains,
		Attrs: req.Attributes, Where: req.Where}
	if req.Since != nil {
		f.Since = *req.Since
	}
	if req.Until != nil {
		f.Until = *req.Until
	}
	steps := backstop.StepSelection{Workflow: req.Workflow, RunID: req.RunID, Step: req.Step}
	if req.Sample < 0 || req.Sample > maxRedriveSample {
		return &apiError{code: codeInvalidInput, field: "sample", detail: fmt.Sprintf("sample: must be between 0 and %d", maxRedriveSample)}
	}
	if req.DryRun {
		prog, err := s.c.Redrive(r.Context(), backstop.RedriveParams{Filter: f, Steps: steps, MergePatch: req.merge(), Patch: ops,
			KeepAttempts: req.KeepAttempts, Delay: time.Duration(req.Delay), RunAt: req.runAt(), Actor: p.Name, Reason: req.Why,
			DryRun: true, SampleSize: req.Sample, All: req.All}, nil)
		if err != nil {
			return err
		}
		m := p.mask
		if m == nil {
			m = defaultMasker
		}
		prog.Preview.Mask(m)
		return writeJSON(w, http.StatusOK, RedriveStatus{RedriveProgress: prog, Status: "dry_run", Actor: p.Name, Why: req.Why, StartedAt: s.now()})
	}
	run, err := s.redrives.start(s.c, backstop.RedriveParams{Filter: f, Steps: steps, Rate: req.Rate, Limit: req.Limit,
		MergePatch: req.merge(), Patch: ops, KeepAttempts: req.KeepAttempts, Delay: time.Duration(req.Delay),
		RunAt: req.runAt(), Actor: p.Name, Reason: req.Why, All: req.All}, s.now)
	if err != nil {
		return err
	}
	st, status := awaitRun(r, run, wait)
	s.log.Info("dead-letter redrive", "actor", p.Name, "why", req.Why, "redrive_id", st.RedriveID, "status", st.Status, "total", st.Total)
	w.Header().Set("Location", "/v1/redrives/"+st.RedriveID)
	return writeJSON(w, status, st)
}

// awaitRun waits for run to end, at most wait (or until the request
// ends), and answers its status: 200 once it ended, 202 while it runs.
func awaitRun(r *http.Request, run *redriveRun, wait time.Duration) (RedriveStatus, int) {
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-run.done:
		case <-t.C:
		case <-r.Context().Done():
		}
		t.Stop()
	}
	st := run.status()
	if st.Status != "running" {
		return st, http.StatusOK
	}
	return st, http.StatusAccepted
}

// GET /v1/redrives/{id}: a redrive this server runs or ran (its live
// progress), or else any redrive from its durable record; both with the
// record's outcome counts, filter and cursor.
func (s *Server) getRedrive(w http.ResponseWriter, r *http.Request) error {
	p := principalFrom(r.Context())
	run := s.redrives.get(r.PathValue("id"))
	if run == nil {
		rec, err := s.c.GetRedrive(r.Context(), r.PathValue("id"))
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, s.withRecord(r.Context(), p, recordStatus(rec), rec))
	}
	return writeJSON(w, http.StatusOK, s.withRecord(r.Context(), p, run.status(), nil))
}

// POST /v1/redrives/{id}/cancel: stops a running redrive after its current
// batch (what was replayed stays replayed; the same POST /v1/dlq/redrive
// again resumes it) and answers its status once it stopped.
func (s *Server) cancelRedrive(w http.ResponseWriter, r *http.Request) error {
	run := s.redrives.get(r.PathValue("id"))
	if run == nil {
		// Run elsewhere (another server, the CLI): canceled in its record;
		// its runner stops after its current batch, and POST
		// /v1/redrives/{id}/resume continues it.
		rec, err := s.c.CancelRedrive(r.Context(), r.PathValue("id"))
		if err != nil {
			return err
		}
		p := principalFrom(r.Context())
		s.log.Info("dead-letter redrive canceled", "actor", p.Name, "redrive_id", rec.ID)
		return writeJSON(w, http.StatusOK, s.withRecord(r.Context(), p, recordStatus(rec), rec))
	}
	run.mu.Lock()
	running := run.st.Status == "running"
	if running {
		run.canceled = true
	}
	run.mu.Unlock()
	if running {
		run.cancel()
		select {
		case <-run.done:
		case <-r.Context().Done():
			return r.Context().Err()
		}
		p := principalFrom(r.Context())
		s.log.Info("dead-letter redrive canceled", "actor", p.Name, "redrive_id", r.PathValue("id"))
	}
	return writeJSON(w, http.StatusOK, run.status())
}
