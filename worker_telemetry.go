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
