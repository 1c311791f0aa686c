package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/filter"
	"github.com/backstophq/backstop/redact"
)

// Payload redaction (docs/redaction.md): every payload the API returns is
// masked key by key (redact package, the server's redaction.keys), for
// every role. An admin may add ?raw=true to a GET to see payloads as
// stored; any other role gets 403. Each task shown raw is audited with a
// task.payload_viewed event naming the token. The worker protocol's claim
// hands workers their payloads raw: they need them to work.

// viewAudit collects the tasks a raw request showed.
type viewAudit struct {
	mu    sync.Mutex
	tasks []*bt.Task
	seen  map[string]bool
}

func (a *viewAudit) add(t *bt.Task) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen[t.ID] {
		return
	}
	a.seen[t.ID] = true
	a.tasks = append(a.tasks, &bt.Task{ID: t.ID, Queue: t.Queue, Kind: t.Kind, Attributes: t.Attributes})
}

// RawRoutes are the reads that take ?raw=true (their payloads can be
// shown raw to an admin).
var RawRoutes = map[string]bool{"GET /v1/tasks": true, "GET /v1/tasks/{id}": true, "GET /v1/dlq": true,
	"GET /v1/dlq/{id}": true, "GET /v1/dlq/export": true, "GET /v1/runs/{run_id}/tasks": true}

// payloadMode reads ?raw on the RawRoutes (and takes it out of the query,
// so the endpoints' own query parsers never see it) and sets how the
// principal sees payloads.
func (s *Server) payloadMode(r *http.Request, p principal) (principal, error) {
	p.mask = s.mask
	if r.URL.RawQuery == "" || !RawRoutes[r.Pattern] {
		return p, nil // the worker protocol's hot path: no query to parse
	}
	q := r.URL.Query()
	if !q.Has("raw") || !RawRoutes[r.Pattern] {
		return p, nil
	}
	vals := q["raw"]
	q.Del("raw")
	r.URL.RawQuery = q.Encode()
	raw, err := strconv.ParseBool(vals[0])
	if len(vals) != 1 || err != nil {
		return p, fail(codeInvalidQuery, fmt.Sprintf("raw %q: want true or false", strings.Join(vals, ",")))
	}
	if !raw {
		return p, nil
	}
	if p.Role < RoleAdmin {
		return p, fail(codeForbidden, fmt.Sprintf("raw payloads need the admin role; token %q is %s", p.Name, p.Role))
	}
	p.audit = &viewAudit{seen: map[string]bool{}}
	return p, nil
}

// auditRaw writes the audit events of a raw request that succeeded.
func (s *Server) auditRaw(r *http.Request, p principal) {
	if p.audit == nil || len(p.audit.tasks) == 0 {
		return
	}
	via := r.Pattern
	if err := s.c.AuditPayloadViews(r.Context(), p.Name, via, p.audit.tasks); err != nil {
		s.log.Error("auditing a raw payload view failed", "actor", p.Name, "tasks", len(p.audit.tasks), "error", err)
	}
}

// maskPayload is the payload as p may see it (recording raw views).
func (p principal) maskPayload(t *bt.Task) json.RawMessage {
	if p.audit != nil && !p.worker {
		p.audit.add(t)
	}
	return p.payloadFor(t)
}

// payloadFor is the payload as p may see it, without recording a raw view
// (a list records only the items its page keeps: listpage.go).
func (p principal) payloadFor(t *bt.Task) json.RawMessage {
	if p.worker || p.audit != nil {
		return t.Payload
	}
	m := p.mask
	if m == nil {
		m = defaultMasker
	}
	return m.JSON(t.Payload)
}

var defaultMasker = redact.New(nil)

// maskEvents masks the payload fragments of a task's history: object keys
// (a merge patch, a payload) and patch operations whose path ends in a
// listed key. Raw requests see them as stored.
func maskEvents(p principal, evs []bt.Event) []bt.Event {
	if evs == nil {
		return []bt.Event{}
	}
	if p.audit != nil {
		return evs
	}
	m := p.mask
	if m == nil {
		m = defaultMasker
	}
	out := make([]bt.Event, len(evs))
	for i, e := range evs {
		out[i] = e
		out[i].Body = backstop.MaskEventBody(m, e.Body)
	}
	return out
}

// whereAllowed: a viewer whose payloads are masked must not filter on a
// masked field's value (it would learn it by the answer). A where naming a
// key the masker masks, or indexing the payload by a computed key, is
// refused with 400 unless the request shows payloads raw (an admin's
// ?raw=true); a bad expression is the library's 400 (it names where).
// Redrive, close and purge are the admin's, who may see payloads raw: not
// checked.
func whereAllowed(p principal, where string) error {
	if where == "" || p.audit != nil || p.worker {
		return nil
	}
	x, err := filter.Compile(where)
	if err != nil {
		return &backstop.ValidationError{Field: "where", Message: err.Error()}
	}
	m := p.mask
	if m == nil {
		m = defaultMasker
	}
	key, ok := x.MaskedRef(m.Matches)
	if !ok {
		return nil
	}
	if key == "*" {
		return &backstop.ValidationError{Field: "where", Message: "indexes the payload by a computed key, which could read a redacted field: " +
			"payloads are redacted in this view (an admin may filter on them with raw=true)"}
	}
	return &backstop.ValidationError{Field: "where", Message: fmt.Sprintf("reads %q, a key redacted from this view: "+
		"filtering on it would reveal its value (an admin may with raw=true)", key)}
}
