package backstop

import (
	"context"
	"time"

	"github.com/backstophq/backstop/store"
)

// settlements lists the items' settlements in a completer's scratch.
func settlements(items []settleItem, scratch *[]store.Settlement) []store.Settlement {
	*scratch = (*scratch)[:0]
	for i := range items {
		*scratch = append(*scratch, items[i].s)
	}
	return *scratch
}

// settledBatch records the in-process attempts of one settle batch once
// the store answered: an attempt whose settlement applied is counted (by
// queue, kind, outcome, with its duration, retry or dead letter) and its
// span ends with the outcome; one that did not apply (its lease was no
// longer current: maintenance settled it as lease_expired, and counted it)
// or could not be written is not counted, and its span ends abandoned.
func (t *telemetry) settledBatch(items []settleItem, oks []bool) {
	// The attempts counter is added to once per run of equal labels.
	var run labelRun[[3]string]
	add := func(k [3]string, n int64) { t.attempts.Add(context.Background(), n, t.outcomeSet(k).add...) }
	for i := range items {
		it := &items[i]
		if i < len(oks) && oks[i] {
			run.add([3]string{it.a.task.Queue, it.a.task.Kind, string(it.s.Outcome)}, add)
			t.settledUncounted(it.a.span, it.a.task, it.a.started, &it.s)
		} else {
			t.leaseLost(it.a.span)
		}
	}
	run.flush(add)
}

// WorkerHeartbeatHorizon bounds HeartbeatingWorkers: a worker not seen for
// longer is left out (it is gone; BackstopNoWorkers and the stale count
// cover a fleet that is gone), so a per-worker heartbeat alert resolves
// by itself an hour after a worker died for good.
const WorkerHeartbeatHorizon = time.Hour

// maxHeartbeatWorkers caps HeartbeatingWorkers per state (the gauge's
// cardinality).
const maxHeartbeatWorkers = 1000

// HeartbeatingWorkers lists the registered workers that should be
// heartbeating — active, stopping, or stale but seen within
// WorkerHeartbeatHorizon — for the per-worker heartbeat gauge
// (backstop_worker_heartbeat_age_seconds).
func (c *Client) HeartbeatingWorkers(ctx context.Context) ([]WorkerInfo, error) {
	var out []WorkerInfo
	since := c.now().Add(-WorkerHeartbeatHorizon)
	for _, st := range []WorkerState{WorkerActive, WorkerStopping, WorkerStale} {
		ws, err := c.Workers(ctx, WorkerListParams{State: st, Limit: maxHeartbeatWorkers})
		if err != nil {
			return nil, err
		}
		for _, w := range ws {
			if !w.LastSeen.Before(since) {
				out = append(out, w)
			}
		}
	}
	return out, nil
}
