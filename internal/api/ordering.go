package api

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
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

// OrderedQueue is one queue of GET /v1/ordering.
type OrderedQueue struct {
	Queue string `json:"queue"`
	// Declared: the server's configuration orders the queue.
	Declared bool `json:"declared"`
	// HasKeys: the queue holds ordering keys now (an undeclared queue is
	// ordered once its tasks carry ordering keys).
	HasKeys bool `json:"has_keys"`
}

// OrderedQueues is GET /v1/ordering.
type OrderedQueues struct {
	Items []OrderedQueue `json:"items"`
}

// GET /v1/ordering: the ordered queues, by name: those the configuration
// orders (with or without tasks) and those holding ordering keys (the
// store's OrderedQueues: one index probe per such queue, never a count of
// the tasks).
func (s *Server) listOrderedQueues(w http.ResponseWriter, r *http.Request) error {
	if len(r.URL.Query()) > 0 {
		return fail(codeInvalidQuery, "GET /v1/ordering takes no parameters")
	}
	byName := map[string]*OrderedQueue{}
	for name, qc := range s.c.Config().Queues {
		if qc.Ordering.Enabled {
			byName[name] = &OrderedQueue{Queue: name, Declared: true}
		}
	}
	keyed, err := s.c.Store().OrderedQueues(r.Context())
	if err != nil {
		return err
	}
	for _, name := range keyed {
		if byName[name] == nil {
			byName[name] = &OrderedQueue{Queue: name}
		}
		byName[name].HasKeys = true
	}
	out := OrderedQueues{Items: make([]OrderedQueue, 0, len(byName))}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		out.Items = append(out.Items, *byName[name])
	}
	return writeJSON(w, http.StatusOK, out)
}
