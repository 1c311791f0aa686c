package api

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
)

// Ordered processing's per-key state (docs/ordering.md), for operators:
// GET /v1/ordering/{queue}/keys.

// OrderingKeyList is a page of a queue's ordering keys.
type OrderingKeyList struct {
	Items      []backstop.OrderingKey `json:"items"`
	NextCursor *string                `json:"next_cursor"`
}

// GET /v1/ordering/{queue}/keys?after=KEY&limit=N
func (s *Server) listOrderingKeys(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	for key, vals := range q {
		switch key {
		case "after", "limit":
			if len(vals) != 1 {
				return fail(codeInvalidQuery, key+": give it once")
			}
		default:
			return fail(codeInvalidQuery, fmt.Sprintf("unknown parameter %q (use after, limit)", key))
		}
	}
	limit := defaultListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxOrderingKeys {
			return fail(codeInvalidQuery, fmt.Sprintf("limit %q: want a whole number from 1 to %d", v, store.MaxOrderingKeys))
		}
		limit = n
	}
	ks, err := s.c.OrderingKeys(r.Context(), r.PathValue("queue"), q.Get("after"), limit)
	if err != nil {
		return err
	}
	out := OrderingKeyList{Items: ks}
	if len(ks) == limit {
		last := ks[len(ks)-1].Key
		out.NextCursor = &last
	}
	return writeJSON(w, http.StatusOK, out)
}
