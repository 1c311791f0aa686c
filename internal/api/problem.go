package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/remote"
	"github.com/backstophq/backstop/store"
)

// problemCode is one row of the API's error table. Codes are part of the
// contract: clients switch on `code`, never on `detail`.
type problemCode struct {
	Status int
	Code   string
	Title  string
}

// The error table: every error response carries one of these codes.
var (
	codeInvalidInput     = problemCode{http.StatusBadRequest, "invalid_input", "The request is not valid"}
	codeInvalidJSON      = problemCode{http.StatusBadRequest, "invalid_json", "The request body is not the JSON this endpoint takes"}
	codeInvalidQuery     = problemCode{http.StatusBadRequest, "invalid_query", "The query string is not valid"}
	codeInvalidCursor    = problemCode{http.StatusBadRequest, "invalid_cursor", "The cursor (after) is not one a page could have given"}
	codeUnauthenticated  = problemCode{http.StatusUnauthorized, "unauthenticated", "A valid bearer token is required"}
	codeForbidden        = problemCode{http.StatusForbidden, "forbidden", "The token's role does not allow this"}
	codeCrossOrigin      = problemCode{http.StatusForbidden, "cross_origin", "Writes from another origin are refused"}
	codeNotFound         = problemCode{http.StatusNotFound, "not_found", "Not found"}
	codeNoRoute          = problemCode{http.StatusNotFound, "no_such_endpoint", "No such endpoint"}
	codeMethodNotAllowed = problemCode{http.StatusMethodNotAllowed, "method_not_allowed", "Method not allowed"}
	codeHostNotAllowed   = problemCode{http.StatusMisdirectedRequest, "host_not_allowed", "This server does not answer to that host name"}
	codeConflict         = problemCode{http.StatusConflict, "conflict", "The request conflicts with the task's current state"}
	codeLeaseNotCurrent  = problemCode{http.StatusConflict, "lease_not_current", "The lease token is not the task's current lease"}
	codeTooLarge         = problemCode{http.StatusRequestEntityTooLarge, "too_large", "The request or its payload is too large"}
	codeUnsupportedMedia = problemCode{http.StatusUnsupportedMediaType, "unsupported_media_type", "The request body must be application/json"}
	codeUnprocessable    = problemCode{http.StatusUnprocessableEntity, "unprocessable", "The change cannot be applied"}
	codeRateLimited      = problemCode{http.StatusTooManyRequests, "rate_limited", "Too many requests for this token"}
	codeInternal         = problemCode{http.StatusInternalServerError, "internal", "Internal error"}
	codeUnavailable      = problemCode{http.StatusServiceUnavailable, "unavailable", "The store is temporarily unavailable; retry after Retry-After"}
)

// unavailableRetryAfter is the Retry-After (seconds) of a 503 unavailable.
const unavailableRetryAfter = "2"

// ProblemCodes lists the error table (docs and tests check against it).
var ProblemCodes = []problemCode{codeInvalidInput, codeInvalidJSON, codeInvalidQuery, codeUnauthenticated,
	codeForbidden, codeNotFound, codeNoRoute, codeMethodNotAllowed, codeConflict, codeLeaseNotCurrent,
	codeTooLarge, codeUnsupportedMedia, codeUnprocessable, codeRateLimited, codeInternal, codeUnavailable,
	codeHostNotAllowed, codeCrossOrigin}

// Problem is an RFC 9457 problem document with Backstop's stable code.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail,omitempty"`
	// Field names the input at fault, when known.
	Field string `json:"field,omitempty"`
	// Index is the 0-based position of the task at fault in a batch.
	Index *int `json:"index,omitempty"`
	// RetryAfter is the answer's Retry-After header (429, 503), filled in
	// by the Go client (internal/apiclient); not part of the document.
	RetryAfter time.Duration `json:"-"`
}

// Error lets the Go client return a Problem as an error.
func (p *Problem) Error() string {
	if p.Detail != "" {
		return p.Code + ": " + p.Detail
	}
	return p.Code + ": " + p.Title
}

// apiError is an error the handlers raise with a chosen code.
type apiError struct {
	code   problemCode
	detail string
	field  string
}

func (e *apiError) Error() string { return e.code.Code + ": " + e.detail }

func fail(code problemCode, detail string) error { return &apiError{code: code, detail: detail} }

// problemFor maps an error to its problem: the one place the library's
// errors become HTTP statuses. Unknown errors become 500 without detail.
func problemFor(err error) (*Problem, bool) {
	p := &Problem{}
	set := func(c problemCode, detail string) {
		p.Type, p.Title, p.Status, p.Code, p.Detail = "urn:backstop:problem:"+c.Code, c.Title, c.Status, c.Code, detail
	}
	var ae *apiError
	var ve *backstop.ValidationError
	var be *backstop.BatchError
	var mbe *http.MaxBytesError
	var ue *store.UnavailableError
	if errors.As(err, &be) {
		i := be.Index
		p.Index = &i
	}
	switch {
	case errors.As(err, &ae):
		set(ae.code, ae.detail)
		p.Field = ae.field
	case errors.As(err, &mbe):
		set(codeTooLarge, "the request body is larger than "+strconv.FormatInt(mbe.Limit, 10)+" bytes")
	case errors.Is(err, backstop.ErrTooLarge):
		set(codeTooLarge, err.Error())
		if errors.As(err, &ve) {
			p.Field = ve.Field
		}
	case errors.Is(err, backstop.ErrUnprocessable):
		set(codeUnprocessable, err.Error())
	case errors.Is(err, backstop.ErrInvalid):
		set(codeInvalidInput, err.Error())
		if errors.As(err, &ve) {
			p.Field = ve.Field
			if ve.Field == "after" { // every listing's cursor parameter
				set(codeInvalidCursor, err.Error())
			}
		}
	case errors.Is(err, backstop.ErrNotFound):
		set(codeNotFound, err.Error())
	case errors.Is(err, remote.ErrLeaseNotCurrent):
		set(codeLeaseNotCurrent, err.Error())
	case errors.Is(err, backstop.ErrConflict):
		set(codeConflict, err.Error())
	case errors.As(store.Classify(err), &ue):
		// The cause, not the driver's message: that stays in the log.
		set(codeUnavailable, "the store is temporarily unavailable ("+ue.Cause+"); retry later")
	default:
		set(codeInternal, "")
		return p, false
	}
	return p, true
}

// writeProblem writes err as application/problem+json. Internal errors are
// logged here and not shown to the client.
func (s *Server) writeProblem(w http.ResponseWriter, r *http.Request, err error) {
	p, known := problemFor(err)
	if p.Status == http.StatusServiceUnavailable {
		s.log.Warn("api: store unavailable", "method", r.Method, "path", r.URL.Path, "error", err)
		w.Header().Set("Retry-After", unavailableRetryAfter)
	}
	if !known {
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			p.Detail = "the request was canceled"
		}
		s.log.Error("api: internal error", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	if p.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="backstop"`)
	}
	if p.Status == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}
