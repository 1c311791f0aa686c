package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
)

// A redrive is a durable job of its own (redrives.go at the root): its
// record and each item's outcome are in the store, so these endpoints
// answer for every redrive, whichever process ran it.

// RedriveRecord is one redrive of GET /v1/redrives and the record part of
// GET /v1/redrives/{id}: its filter and patch (masked), snapshot, cursor,
// counts, status and items counted by outcome.
type RedriveRecord = backstop.RedriveRecord

// RedriveList is GET /v1/redrives.
type RedriveList struct {
	Items []RedriveRecord `json:"items"`
	// Next: the `before` of the next page, when this one is full.
	Next string `json:"next,omitempty"`
}

// RedriveItemList is GET /v1/redrives/{id}/items.
type RedriveItemList struct {
	Items []backstop.RedriveItem `json:"items"`
	Next  string                 `json:"next,omitempty"`
}

// ResumeRequest is POST /v1/redrives/{id}/resume: the pace and the
// operator; the filter and patch are the redrive's own.
type ResumeRequest struct {
	Rate  float64     `json:"rate,omitempty"`
	Limit int         `json:"limit,omitempty"`
	Why   string      `json:"why,omitempty"`
	Wait  bt.Duration `json:"wait,omitempty"`
	// Force takes over a redrive whose runner (another process) was seen
	// recently; without it that is refused with 409.
	Force bool `json:"force,omitempty"`
}

func onlyParams(q url.Values, allowed ...string) error {
	for k, v := range q {
		ok := false
		for _, a := range allowed {
			ok = ok || k == a
		}
		if !ok {
			return fail(codeInvalidQuery, fmt.Sprintf("unknown parameter %q (use %s)", k, strings.Join(allowed, ", ")))
		}
		if len(v) != 1 {
			return fail(codeInvalidQuery, k+": give it once")
		}
	}
	return nil
}

func queryLimit(q url.Values) (int, error) {
	if !q.Has("limit") {
		return 100, nil
	}
	n, err := strconv.Atoi(q.Get("limit"))
	if err != nil || n < 1 || n > 1000 {
		return 0, fail(codeInvalidQuery, fmt.Sprintf("limit %q: want 1 to 1000", q.Get("limit")))
	}
	return n, nil
}

// maskRecord masks the patch values of a redrive's filter for p.
func maskRecord(p principal, rec *RedriveRecord) {
	if len(rec.Filter) == 0 {
		return
	}
	m := p.mask
	if m == nil {
		m = defaultMasker
	}
	rec.Filter = backstop.MaskEventBody(m, rec.Filter)
}

// GET /v1/redrives: the redrives, newest first (before, limit).
func (s *Server) listRedrives(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if err := onlyParams(q, "before", "limit"); err != nil {
		return err
	}
	limit, err := queryLimit(q)
	if err != nil {
		return err
	}
	recs, err := s.c.Redrives(r.Context(), q.Get("before"), limit)
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	out := RedriveList{Items: make([]RedriveRecord, 0, len(recs))}
	for _, rec := range recs {
		full, err := s.c.GetRedrive(r.Context(), rec.ID)
		if err != nil {
			return err
		}
		maskRecord(p, full)
		out.Items = append(out.Items, *full)
	}
	if len(recs) == limit {
		out.Next = recs[len(recs)-1].ID
	}
	return writeJSON(w, http.StatusOK, out)
}

// recordStatus is the status of a redrive this server does not run, from
// its record.
func recordStatus(rec *RedriveRecord) RedriveStatus {
	st := RedriveStatus{RedriveProgress: backstop.RedriveProgress{RedriveID: rec.ID, Kind: rec.Kind, Snapshot: rec.Snapshot,
		Total: rec.Replayed + rec.Failed, Replayed: rec.Replayed, Failed: rec.Failed,
		Done: rec.Status == backstop.RedriveDone || rec.Status == backstop.RedriveEmpty, Empty: rec.Status == backstop.RedriveEmpty},
		Status: rec.Status, StartedAt: rec.StartedAt, FinishedAt: rec.FinishedAt}
	return st
}

// withRecord adds the durable record's fields to a status.
func (s *Server) withRecord(ctx context.Context, p principal, st RedriveStatus, rec *RedriveRecord) RedriveStatus {
	if rec == nil {
		var err error
		if rec, err = s.c.GetRedrive(ctx, st.RedriveID); err != nil {
			return st
		}
	}
	maskRecord(p, rec)
	st.Outcomes, st.Filter, st.Cursor = rec.Outcomes, rec.Filter, rec.Cursor
	st.Runner, st.HeartbeatAt, st.RunnerAlive, st.Resumable = rec.Runner, rec.HeartbeatAt, rec.RunnerAlive, rec.Resumable
	return st
}

// GET /v1/redrives/{id}/items: a redrive's items and their outcomes
// (outcome=a,b; failed=true: those that did not replay; after, limit).
func (s *Server) redriveItems(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if err := onlyParams(q, "outcome", "failed", "after", "limit"); err != nil {
		return err
	}
	limit, err := queryLimit(q)
	if err != nil {
		return err
	}
	p := backstop.RedriveItemsParams{ID: r.PathValue("id"), AfterID: q.Get("after"), Limit: limit}
	if q.Has("failed") {
		if p.Failed, err = strconv.ParseBool(q.Get("failed")); err != nil {
			return fail(codeInvalidQuery, fmt.Sprintf("failed %q: want true or false", q.Get("failed")))
		}
	}
	if o := q.Get("outcome"); o != "" {
		p.Outcomes = strings.Split(o, ",")
	}
	items, err := s.c.RedriveItems(r.Context(), p)
	if err != nil {
		return err
	}
	out := RedriveItemList{Items: items}
	if len(items) == limit {
		out.Next = items[len(items)-1].TaskID
	}
	return writeJSON(w, http.StatusOK, out)
}

// POST /v1/redrives/{id}/resume: continues an unfinished redrive (canceled,
// or left by a process that stopped) from its cursor with its own filter
// and patch, in the background as POST /v1/dlq/redrive does.
func (s *Server) resumeRedrive(w http.ResponseWriter, r *http.Request) error {
	var req ResumeRequest
	if err := decodeOptional(r, &req); err != nil {
		return err
	}
	wait := time.Duration(req.Wait)
	if wait < 0 || wait > MaxRedriveWait {
		return &apiError{code: codeInvalidInput, field: "wait", detail: fmt.Sprintf("wait: must be between 0s and %s", MaxRedriveWait)}
	}
	if err := s.c.CheckReason("why", req.Why); err != nil {
		return err
	}
	id := r.PathValue("id")
	if run := s.redrives.get(id); run != nil && run.status().Status == "running" {
		return writeJSON(w, http.StatusAccepted, run.status())
	}
	p := principalFrom(r.Context())
	params := backstop.RedriveParams{Rate: req.Rate, Limit: req.Limit, Actor: p.Name, Reason: req.Why, Force: req.Force}
	run, err := s.redrives.startWith(func(ctx context.Context, progress func(backstop.RedriveProgress)) (backstop.RedriveProgress, error) {
		return s.c.ResumeRedrive(ctx, id, params, progress)
	}, params, s.now)
	if err != nil {
		return err
	}
	st, status := awaitRun(r, run, wait)
	s.log.Info("dead-letter redrive resumed", "actor", p.Name, "why", req.Why, "redrive_id", st.RedriveID, "status", st.Status)
	w.Header().Set("Location", "/v1/redrives/"+st.RedriveID)
	return writeJSON(w, status, s.withRecord(r.Context(), p, st, nil))
}
