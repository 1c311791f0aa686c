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
	// TasksCapped lists the states whose counts (and so TasksTotal) are
	// lower bounds (store.QueueCounts.Capped: on PostgreSQL, succeeded and
	// canceled are counted among the newest 10,000 finished tasks).
	// Absent: every count is exact.
	TasksCapped []bt.State `json:"tasks_capped,omitempty"`
}

// dlqStatuses are the dead letters' statuses, as the counts list them.
var dlqStatuses = []bt.DLQStatus{bt.DLQOpen, bt.DLQReplayed, bt.DLQDiscarded, bt.DLQResolved}

// GET /v1/counts?queue=Q: the console's state tabs: the queues' counts
// (store.APIStore.CountByQueue: one read, bounded by queues × states ×
// statuses), so it holds no other filter.
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
	cs, ok := s.c.Store().(store.APIStore)
	if !ok {
		return errors.New("this store cannot count by state")
	}
	qs, err := cs.CountByQueue(r.Context())
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
	if len(qs) > 0 {
		out.TasksCapped = qs[0].Capped // the same for every queue
	}
	for _, c := range qs {
		if queue != "" && c.Queue != queue {
			continue
		}
		for st, n := range c.Counts {
			out.Tasks[st] += n
			out.TasksTotal += n
		}
		for st, n := range c.DeadLetters {
			out.DeadLetters[st] += n
		}
	}
	return writeJSON(w, http.StatusOK, out)
}
