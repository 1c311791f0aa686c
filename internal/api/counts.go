package api

import (
	"errors"
	"net/http"
	"strconv"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// CountsResponse is GET /v1/counts: the tasks by state and the dead letters
// by status, of one queue or of all. Every state and status is present,
// zero included.
type CountsResponse struct {
	// Queue is the queue counted ("" for all of them).
	Queue       string               `json:"queue"`
	Tasks       map[bt.State]int     `json:"tasks"`
	TasksTotal  int                  `json:"tasks_total"`
	DeadLetters map[bt.DLQStatus]int `json:"dead_letters"`
}

// dlqStatuses are the dead letters' statuses, as the counts list them.
var dlqStatuses = []bt.DLQStatus{bt.DLQOpen, bt.DLQReplayed, bt.DLQDiscarded, bt.DLQResolved}

// GET /v1/counts?queue=Q: the console's state tabs. One grouped scan (the
// store's gauge query, bounded by queues × states × statuses), so it holds
// no other filter.
func (s *Server) getCounts(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	for k, v := range q {
		if k != "queue" {
			return fail(codeInvalidQuery, "unknown parameter "+strconv.Quote(k)+" (use queue)")
		}
		if len(v) != 1 {
			return fail(codeInvalidQuery, "queue: give it once")
		}
	}
	queue := q.Get("queue") // compared in Go: a queue with no tasks counts zero
	gr, ok := s.c.Store().(store.GaugeReader)
	if !ok {
		return errors.New("this store cannot count by state")
	}
	g, err := gr.Gauges(r.Context())
	if err != nil {
		return err
	}
	out := CountsResponse{Queue: queue, Tasks: make(map[bt.State]int, len(bt.States)), DeadLetters: make(map[bt.DLQStatus]int, len(dlqStatuses))}
	for _, st := range bt.States {
		out.Tasks[st] = 0
	}
	for _, st := range dlqStatuses {
		out.DeadLetters[st] = 0
	}
	for name, counts := range g.Tasks {
		if queue != "" && name != queue {
			continue
		}
		for st, n := range counts {
			out.Tasks[st] += n
			out.TasksTotal += n
		}
	}
	for name, counts := range g.DeadLetters {
		if queue != "" && name != queue {
			continue
		}
		for st, n := range counts {
			if st != "" {
				out.DeadLetters[st] += n
			}
		}
	}
	return writeJSON(w, http.StatusOK, out)
}
