package api

import (
	"net/http"
	"strconv"

	"github.com/backstophq/backstop/internal/relay"
)

// RelayStatus is GET /v1/relay: each sink's outbox messages and each
// event-log checkpoint (docs/brokers.md, backstop relay status).
type RelayStatus = relay.Status

// GET /v1/relay: read by relay.ReadStatus, the function backstop relay
// status calls on a database.
func (s *Server) getRelay(w http.ResponseWriter, r *http.Request) error {
	for k := range r.URL.Query() {
		return fail(codeInvalidQuery, "unknown parameter "+strconv.Quote(k)+" (GET /v1/relay takes none)")
	}
	st, err := relay.ReadStatus(r.Context(), s.c)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, st)
}
