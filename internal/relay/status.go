package relay

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Status is where the relays stand: each sink's outbox messages and each
// event-log checkpoint (backstop relay status, GET /v1/relay).
type Status struct {
	Sinks       []SinkStatus       `json:"sinks"`
	Checkpoints []CheckpointStatus `json:"checkpoints"`
	// Ingesters: each ingester's last report (backstop ingest, serve's
	// ingest: list), by group and topic.
	Ingesters []IngestStatus `json:"ingesters"`
	// At is when it was read (the client's clock).
	At time.Time `json:"at"`
}

// SinkStatus is one sink's messages (its queue sink.<name>).
type SinkStatus struct {
	Sink  string `json:"sink"`
	Queue string `json:"queue"`
	// Pending counts the messages not delivered yet (scheduled, pending,
	// buffered or running: waiting, retrying or in flight).
	Pending int64 `json:"pending"`
	// LagSeconds is how long the oldest claimable message has waited
	// since it became due (0: none waiting).
	LagSeconds float64 `json:"lag_seconds"`
	// Dead counts the open dead letters: messages the sink refused or that
	// ran out of attempts, waiting for an operator.
	Dead int64 `json:"dead"`
	// LastError is the error of the newest undelivered or dead message
	// that has one.
	LastError string `json:"last_error"`
}

// CheckpointStatus is one stream of one event-log checkpoint.
type CheckpointStatus struct {
	store.RelayCheckpoint
	// EventsBehind counts the stream's events after the checkpoint, up to
	// MaxCountedLag (EventsBehindCapped: there are more).
	EventsBehind       int64 `json:"events_behind"`
	EventsBehindCapped bool  `json:"events_behind_capped,omitempty"`
	// LagSeconds is the age of the oldest event not yet published (0:
	// caught up).
	LagSeconds float64 `json:"lag_seconds"`

	oldest *time.Time // the oldest event not yet published
}

// IngestStatus is one ingester's last report, its lag in time dated at
// the read: it keeps growing while the ingester is stuck or gone (see
// UpdatedAt).
type IngestStatus struct {
	store.IngestPosition
	// LagSeconds is how far behind the broker the ingester is, from the
	// broker timestamp it reported (0: caught up).
	LagSeconds float64 `json:"lag_seconds"`
}

var sinkQueuePrefix = backstop.SinkQueue("")

// MaxCountedLag bounds how many events behind a checkpoint are counted
// (each is read: a checkpoint far behind is reported as at least this).
const MaxCountedLag = 10000

// ReadStatus reads every sink queue's messages and every checkpoint.
func ReadStatus(ctx context.Context, c *backstop.Client) (*Status, error) {
	now := c.Engine().Now()
	out := &Status{Sinks: []SinkStatus{}, Checkpoints: []CheckpointStatus{}, Ingesters: []IngestStatus{}, At: now}
	gr, ok := c.Store().(store.GaugeReader)
	if !ok {
		return nil, errors.New("relay status: the store reads no gauges")
	}
	g, err := gr.Gauges(ctx)
	if err != nil {
		return nil, err
	}
	var queues []string
	for q := range g.Tasks {
		if strings.HasPrefix(q, sinkQueuePrefix) {
			queues = append(queues, q)
		}
	}
	for q := range g.DeadLetters {
		if strings.HasPrefix(q, sinkQueuePrefix) && g.Tasks[q] == nil {
			queues = append(queues, q)
		}
	}
	slices.Sort(queues)
	for _, q := range queues {
		s := SinkStatus{Sink: strings.TrimPrefix(q, sinkQueuePrefix), Queue: q, Dead: int64(g.DeadLetters[q][bt.DLQOpen])}
		for _, st := range []bt.State{bt.StateScheduled, bt.StatePending, bt.StateBuffered, bt.StateRunning} {
			s.Pending += int64(g.Tasks[q][st])
		}
		if at, ok := g.OldestPending[q]; ok {
			s.LagSeconds = max(now.Sub(at).Seconds(), 0)
		}
		if s.Pending > 0 || s.Dead > 0 {
			ts, err := c.List(ctx, backstop.ListParams{Queue: q, Newest: true, Limit: 20, WithoutPayload: true,
				States: []bt.State{bt.StateScheduled, bt.StatePending, bt.StateBuffered, bt.StateRunning, bt.StateDead}})
			if err != nil {
				return nil, err
			}
			for _, t := range ts {
				if t.LastError != "" {
					s.LastError = t.LastError
					break
				}
			}
		}
		out.Sinks = append(out.Sinks, s)
	}
	cps, err := c.Store().ListRelayCheckpoints(ctx)
	if err != nil {
		return nil, err
	}
	for _, cp := range cps {
		cs, err := checkpointStatus(ctx, c, cp, now, 4*MaxCountedLag/store.MaxEventLimit)
		if err != nil {
			return nil, err
		}
		out.Checkpoints = append(out.Checkpoints, cs)
	}
	ps, err := c.Store().ListIngestPositions(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		is := IngestStatus{IngestPosition: p}
		if p.LagFrom != nil {
			is.LagSeconds = max(now.Sub(*p.LagFrom).Seconds(), 0)
		}
		out.Ingesters = append(out.Ingesters, is)
	}
	return out, nil
}

// CheckpointGauges reads each checkpoint's lag for the relay gauges: one
// read of its stream, so the events behind are counted up to
// store.MaxEventLimit.
func CheckpointGauges(ctx context.Context, c *backstop.Client) ([]store.RelayCheckpointGauge, error) {
	cps, err := c.Store().ListRelayCheckpoints(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]store.RelayCheckpointGauge, 0, len(cps))
	for _, cp := range cps {
		cs, err := checkpointStatus(ctx, c, cp, time.Time{}, 1)
		if err != nil {
			return nil, err
		}
		out = append(out, store.RelayCheckpointGauge{Name: cp.Name, Stream: cp.Stream, Sink: cp.Sink, EventsBehind: cs.EventsBehind, OldestEvent: cs.oldest})
	}
	return out, nil
}

// checkpointStatus counts the events of cp's stream after its cursor (up
// to MaxCountedLag, in at most reads reads) and dates the first of them.
func checkpointStatus(ctx context.Context, c *backstop.Client, cp store.RelayCheckpoint, now time.Time, reads int) (CheckpointStatus, error) {
	cs := CheckpointStatus{RelayCheckpoint: cp}
	after := cp.Cursor
	// A filtered stream's read examines a window of the log and may move
	// on with no event: the reads are bounded too.
	for range reads {
		page, err := c.ReadEvents(ctx, backstop.ReadEventsParams{Stream: cp.Stream, After: after, Limit: store.MaxEventLimit})
		if err != nil {
			return cs, err
		}
		if cs.EventsBehind == 0 && len(page.Events) > 0 {
			cs.oldest = &page.Events[0].Time
			cs.LagSeconds = max(now.Sub(page.Events[0].Time).Seconds(), 0)
		}
		cs.EventsBehind += int64(len(page.Events))
		if page.Next == after {
			return cs, nil
		}
		if cs.EventsBehind >= MaxCountedLag {
			break
		}
		after = page.Next
	}
	cs.EventsBehindCapped = true
	return cs, nil
}
