package api

import (
	"net/http"

	"github.com/backstophq/backstop/internal/audit"
)

// GET /v1/audit?actor=&type=&since=&until=&target=&after=&limit= (viewer:
// the same events GET /v1/events serves a viewer, filtered): the
// operators' actions, oldest first (docs/api.md, docs/events.md).
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if err := onlyParams(q, "actor", "type", "since", "until", "target", "after", "limit"); err != nil {
		return err
	}
	query, err := audit.Parse(audit.Params{Actor: q.Get("actor"), Type: q.Get("type"), Since: q.Get("since"),
		Until: q.Get("until"), Target: q.Get("target"), After: q.Get("after"), Limit: q.Get("limit")}, s.now())
	if err != nil {
		return err
	}
	page, err := audit.List(r.Context(), s.c, query)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, page)
}
