package apiclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
)

// Reliable reports of the worker protocol. A settled attempt is data: a
// worker whose report is refused by the rate limit (429), lost to a server
// restart (connection refused or reset) or to an overloaded proxy (502, 503,
// 504) must try again, not let the lease expire and the task be charged a
// failure. The Report methods retry such answers with a capped exponential
// backoff with jitter, honouring Retry-After, until the report lands, the
// lease is lost (409, 404) or ctx ends: the caller bounds the retrying with
// ctx, typically ending it when the lease expires with no successful
// heartbeat (keep heartbeating while a report is retried).
//
// A retried report whose earlier try did land (only its answer was lost)
// gets 409 from the server, as any report of a lease that is no longer
// current; the Report methods then read the task and count the report as
// done when the task's history shows this lease's attempt settled with the
// reported outcome.

// StatusError is an error answer whose body is not a problem document (a
// proxy's 502, say).
type StatusError struct {
	Method, Path string
	Status       int
	// RetryAfter is the answer's Retry-After header (0: none).
	RetryAfter time.Duration
	Body       string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("backstop: %s %s: HTTP %d: %.200s", e.Method, e.Path, e.Status, e.Body)
}

// parseRetryAfter reads a Retry-After header: seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, int64(24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), 24*time.Hour)
	}
	return 0
}

// StatusOf is the HTTP status of an error answer (0 when err is not one:
// a connection error, a timeout).
func StatusOf(err error) int {
	var p *api.Problem
	var se *StatusError
	switch {
	case errors.As(err, &p):
		return p.Status
	case errors.As(err, &se):
		return se.Status
	}
	return 0
}

// Retryable reports whether a failed worker-protocol report is worth
// sending again, and how long the server asked to wait first (0: it did not
// say). Retryable are the rate limit (429), server and proxy failures
// (500, 502, 503, 504: a report is guarded by its lease, so sending it twice
// cannot apply it twice) and errors that got no answer at all (connection
// refused or reset, a try's timeout). Not retryable: every other answer
// (400, 401, 403, 404, 409, 413, ...) and the caller's own ctx ending.
func Retryable(err error) (bool, time.Duration) {
	if err == nil {
		return false, 0
	}
	var p *api.Problem
	var se *StatusError
	status, after := 0, time.Duration(0)
	switch {
	case errors.As(err, &p):
		status, after = p.Status, p.RetryAfter
	case errors.As(err, &se):
		status, after = se.Status, se.RetryAfter
	default:
		// No answer: a transport error (or a try's own timeout; the
		// caller's ctx ending is checked by the loop).
		return true, 0
	}
	switch status {
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true, after
	}
	return false, 0
}

// Retry is how the Report methods retry. The zero value (or nil) takes the
// defaults named at the end of each field's comment.
type Retry struct {
	// Base is the first backoff; each further one doubles, up to Max, and
	// is jittered to between half and all of that. Default: 100ms.
	Base time.Duration
	// Max caps the backoff (not a server's longer Retry-After, which is
	// honoured as given, up to MaxRetryAfter). Default: 5s.
	Max time.Duration
	// MaxRetryAfter caps how long a Retry-After is honoured. Default: 1m.
	MaxRetryAfter time.Duration
	// TryTimeout bounds each try. Default: 30s.
	TryTimeout time.Duration
	// OnRetry, when set, is called before each wait (for logs).
	OnRetry func(try int, err error, wait time.Duration)
}

func (r *Retry) orDefault() Retry {
	var o Retry
	if r != nil {
		o = *r
	}
	if o.Base <= 0 {
		o.Base = 100 * time.Millisecond
	}
	if o.Max <= 0 {
		o.Max = 5 * time.Second
	}
	if o.MaxRetryAfter <= 0 {
		o.MaxRetryAfter = time.Minute
	}
	if o.TryTimeout <= 0 {
		o.TryTimeout = 30 * time.Second
	}
	return o
}

// Backoff is the wait before try number try+1 (try counts from 0): Base
// doubled try times, capped at Max, jittered to [d/2, d].
func (r *Retry) Backoff(try int) time.Duration {
	o := r.orDefault()
	d := o.Base
	for range try {
		if d >= o.Max {
			break
		}
		d *= 2
	}
	d = min(d, o.Max)
	return d/2 + rand.N(d/2+1)
}

// Do calls fn until it succeeds, fails with an error Retryable refuses, or
// ctx ends; between tries it waits the backoff or the server's Retry-After,
// whichever is longer. It returns the number of tries made and fn's last
// error (wrapped, when ctx ended, with why it gave up).
func (r *Retry) Do(ctx context.Context, fn func(ctx context.Context) error) (int, error) {
	o := r.orDefault()
	for try := 0; ; try++ {
		tctx, cancel := context.WithTimeout(ctx, o.TryTimeout)
		err := fn(tctx)
		cancel()
		if err == nil {
			return try + 1, nil
		}
		if ctx.Err() != nil {
			return try + 1, giveUp(ctx, try+1, err)
		}
		ok, after := Retryable(err)
		if !ok {
			return try + 1, err
		}
		wait := max(r.Backoff(try), min(after, o.MaxRetryAfter))
		if o.OnRetry != nil {
			o.OnRetry(try+1, err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return try + 1, giveUp(ctx, try+1, err)
		case <-t.C:
		}
	}
}

func giveUp(ctx context.Context, tries int, last error) error {
	return fmt.Errorf("gave up after %d tries (%w); last error: %w", tries, context.Cause(ctx), last)
}

// Lease names one claimed attempt for the Report methods: the task, the
// lease token (an opaque secret), and what identifies the attempt in the
// task's history (to recognise a report that landed though its answer was
// lost).
type Lease struct {
	TaskID string
	Token  string
	// ExecutionID is the attempt's execution id as the claim showed it
	// (empty: recognise the attempt by Attempt and WorkerID).
	ExecutionID string
	Attempt     int
	WorkerID    string
}

// LeaseOf is the lease of a claimed task.
func LeaseOf(ct api.ClaimedTask) Lease {
	l := Lease{Token: ct.LeaseToken}
	if ct.Task != nil {
		l.TaskID, l.ExecutionID, l.Attempt, l.WorkerID = ct.ID, ct.ExecutionID, ct.Attempt, ct.WorkerID
	}
	return l
}

// ErrLeaseLost: the report cannot land, the lease is no longer the
// caller's (the server answered 409 or 404, and the task's history does
// not show this lease's attempt settled with the reported outcome).
var ErrLeaseLost = errors.New("the lease is lost")

// Report is a report the server took.
type Report struct {
	*api.SettleResponse
	// Tries is how many requests it took.
	Tries int
	// Confirmed: a retry was refused (409) because an earlier try had
	// landed and only its answer was lost; the task's history shows this
	// lease's attempt settled with the reported outcome. SettleResponse
	// then holds the task's state as read.
	Confirmed bool
}

// ReportComplete reports success, retrying as the package comment says.
func (c *Client) ReportComplete(ctx context.Context, l Lease, req api.CompleteRequest, r *Retry) (*Report, error) {
	req.LeaseToken = l.Token
	return c.report(ctx, l, bt.OutcomeSucceeded, r, func(ctx context.Context) (*api.SettleResponse, error) {
		return c.Complete(ctx, l.TaskID, req)
	})
}

// ReportFail reports a failed attempt, retrying as the package comment says.
func (c *Client) ReportFail(ctx context.Context, l Lease, req api.FailRequest, r *Retry) (*Report, error) {
	req.LeaseToken = l.Token
	want := req.Outcome
	if req.RetryAfter != nil && want == bt.OutcomeTransientError {
		want = bt.OutcomeSnoozed
	}
	return c.report(ctx, l, want, r, func(ctx context.Context) (*api.SettleResponse, error) {
		return c.Fail(ctx, l.TaskID, req)
	})
}

// ReportRelease gives the attempt back uncharged, retrying as the package
// comment says.
func (c *Client) ReportRelease(ctx context.Context, l Lease, req api.ReleaseRequest, r *Retry) (*Report, error) {
	req.LeaseToken = l.Token
	return c.report(ctx, l, bt.OutcomeReleased, r, func(ctx context.Context) (*api.SettleResponse, error) {
		return c.Release(ctx, l.TaskID, req)
	})
}

// ReportLogs sends an attempt's log lines, retrying on the same errors. A
// 409 (the lease is no longer current) comes back as ErrLeaseLost: the
// server keeps no more lines of that attempt.
func (c *Client) ReportLogs(ctx context.Context, l Lease, req api.LogsRequest, r *Retry) (*api.LogsResponse, error) {
	req.LeaseToken = l.Token
	var out *api.LogsResponse
	_, err := r.Do(ctx, func(ctx context.Context) error {
		var err error
		out, err = c.AppendLogs(ctx, l.TaskID, req)
		return err
	})
	if s := StatusOf(err); s == http.StatusConflict || s == http.StatusNotFound {
		return nil, fmt.Errorf("%w: %w", ErrLeaseLost, err)
	}
	return out, err
}

func (c *Client) report(ctx context.Context, l Lease, want bt.Outcome, r *Retry,
	send func(context.Context) (*api.SettleResponse, error)) (*Report, error) {
	var res *api.SettleResponse
	tries, err := r.Do(ctx, func(ctx context.Context) error {
		var err error
		res, err = send(ctx)
		return err
	})
	if err == nil {
		return &Report{SettleResponse: res, Tries: tries}, nil
	}
	return c.settled(ctx, l, want, r, tries, err)
}

// settled explains a report refused with err: a 404 or a 409 whose task
// history does not show l's attempt ended with want is ErrLeaseLost; a 409
// whose history does (an earlier try landed, its answer was lost) is a
// confirmed Report; any other error is returned as is.
func (c *Client) settled(ctx context.Context, l Lease, want bt.Outcome, r *Retry, tries int, err error) (*Report, error) {
	switch StatusOf(err) {
	case http.StatusNotFound:
		return nil, fmt.Errorf("%w: %w", ErrLeaseLost, err)
	case http.StatusConflict:
	default:
		return nil, err
	}
	// 409: the lease is not current. Either it was lost, or this report
	// (an earlier try of it, whose answer went missing) already settled
	// it: the task's history tells which.
	var t *api.TaskView
	_, gerr := r.Do(ctx, func(ctx context.Context) error {
		var err error
		t, err = c.Get(ctx, l.TaskID)
		return err
	})
	if gerr != nil {
		if StatusOf(gerr) == http.StatusNotFound {
			return nil, fmt.Errorf("%w: %w", ErrLeaseLost, err)
		}
		return nil, fmt.Errorf("%w; reading the task to check whether an earlier try landed: %w", err, gerr)
	}
	ex := l.find(t)
	if ex == nil || ex.Outcome != want {
		got := "no execution of this lease"
		if ex != nil {
			got = "this lease's attempt ended " + string(ex.Outcome)
		}
		return nil, fmt.Errorf("%w: the task is %s, %s: %w", ErrLeaseLost, t.State, got, err)
	}
	return &Report{SettleResponse: &api.SettleResponse{TaskID: l.TaskID, Outcome: want, State: t.State},
		Tries: tries, Confirmed: true}, nil
}

// CompletionReport is one item of ReportCompleteMany: its Report, or the
// error that refused it (ErrLeaseLost for a lost lease).
type CompletionReport struct {
	TaskID string
	Report *Report
	Err    error
}

// Completion is one successful attempt for ReportCompleteMany: its lease,
// and what a single complete would carry (the result, the progress).
type Completion struct {
	Lease    Lease
	Result   json.RawMessage
	Progress *bt.Progress
}

// ReportCompleteMany reports many successful attempts in one request
// (POST /v1/tasks/complete, at most api.MaxCompleteBatch), retrying the
// request as ReportComplete does; each item refused with 409 is then
// checked against its task's history like a single report. The error is
// the request's (nothing was decided); per-item outcomes are in the
// results, in the order of cs.
func (c *Client) ReportCompleteMany(ctx context.Context, cs []Completion, r *Retry) ([]CompletionReport, error) {
	items := make([]api.CompletionItem, len(cs))
	for i, x := range cs {
		items[i] = api.CompletionItem{TaskID: x.Lease.TaskID, LeaseToken: x.Lease.Token, Result: x.Result, Progress: x.Progress}
	}
	var res *api.CompleteBatchResponse
	tries, err := r.Do(ctx, func(ctx context.Context) error {
		var err error
		res, err = c.CompleteMany(ctx, items)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(res.Results) != len(cs) {
		return nil, fmt.Errorf("backstop: POST /v1/tasks/complete: %d results for %d completions", len(res.Results), len(cs))
	}
	out := make([]CompletionReport, len(cs))
	for i, it := range res.Results {
		out[i].TaskID = cs[i].Lease.TaskID
		if it.Problem == nil {
			out[i].Report = &Report{SettleResponse: it.Result, Tries: tries}
			continue
		}
		out[i].Report, out[i].Err = c.settled(ctx, cs[i].Lease, bt.OutcomeSucceeded, r, tries, it.Problem)
	}
	return out, nil
}

// find is the lease's execution in the task's history, or nil.
func (l Lease) find(t *api.TaskView) *bt.Execution {
	if t == nil || t.Task == nil || t.Executions == nil {
		return nil
	}
	ex := *t.Executions
	for i := len(ex) - 1; i >= 0; i-- {
		e := &ex[i]
		if l.ExecutionID != "" {
			if e.ExecutionID == l.ExecutionID {
				return e
			}
			continue
		}
		if l.Attempt > 0 && e.Attempt == l.Attempt && (l.WorkerID == "" || e.WorkerID == l.WorkerID) {
			return e
		}
	}
	return nil
}
