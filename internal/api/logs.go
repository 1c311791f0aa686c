package api

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/remote"
)

// Execution logs: remote workers append with their lease token; readers
// page by seq, or download the whole log as text.

// LogsRequest is POST /v1/tasks/{id}/logs: lines of the attempt the lease
// token names (stream output, the default, or log).
type LogsRequest struct {
	LeaseToken string           `json:"lease_token"`
	Lines      []remote.LogLine `json:"lines"`
}

// LogsResponse says how many lines were kept; Truncated: the execution's
// log reached its bound (later lines are dropped).
type LogsResponse = remote.LogResult

// LogPage is a page of an execution's log; NextCursor (the last seq, null
// on the last page) goes into the next request's `after`.
type LogPage struct {
	Items      []backstop.LogLine `json:"items"`
	NextCursor *string            `json:"next_cursor"`
}

func (s *Server) appendLogs(w http.ResponseWriter, r *http.Request) error {
	var req LogsRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	res, err := s.rp.AppendLogs(actorContext(r), r.PathValue("id"), req.LeaseToken, req.Lines)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, res)
}

// GET /v1/tasks/{id}/executions/{execution_id}/logs?after=&limit=&format=
func (s *Server) readLogs(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	for key, vals := range q {
		switch key {
		case "after", "limit", "format":
			if len(vals) != 1 {
				return fail(codeInvalidQuery, key+": give it once")
			}
		default:
			return fail(codeInvalidQuery, fmt.Sprintf("unknown parameter %q (use after, limit, format)", key))
		}
	}
	text := false
	switch q.Get("format") {
	case "", "json":
	case "text":
		text = true
	default:
		return fail(codeInvalidQuery, fmt.Sprintf("format %q: use json or text", q.Get("format")))
	}
	num := func(key string, def int) (int, error) {
		v := q.Get(key)
		if v == "" {
			return def, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, fail(codeInvalidQuery, fmt.Sprintf("%s %q: want a whole number", key, v))
		}
		return n, nil
	}
	after, err := num("after", 0)
	if err != nil {
		return fail(codeInvalidCursor, fmt.Sprintf("after %q: a log cursor is the seq of the last line read", q.Get("after")))
	}
	def := defaultListLimit * 10
	if text {
		def = backstop.MaxLogLines + 1 // the whole log
	}
	limit, err := num("limit", def)
	if err != nil {
		return err
	}
	lines, err := s.c.ReadLogs(r.Context(), r.PathValue("id"), r.PathValue("execution_id"), after, limit)
	if err != nil {
		return err
	}
	if text {
		var b strings.Builder
		for _, l := range lines {
			b.WriteString(l.Line)
			b.WriteByte('\n')
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(b.String()))
		return nil
	}
	out := LogPage{Items: lines}
	if len(lines) == limit && limit > 0 {
		c := strconv.Itoa(lines[len(lines)-1].Seq)
		out.NextCursor = &c
	}
	return writeJSON(w, http.StatusOK, out)
}
