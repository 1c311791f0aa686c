package telemetry

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// relayGauges are the relays' gauges (docs/brokers.md), from the store
// like the others (every process shows the same; alerts take the max):
// per sink, from the sink queues' rows of the snapshot,
// backstop_sink_pending_messages, backstop_sink_lag_seconds and
// backstop_sink_dead_messages {sink}; per checkpoint stream,
// backstop_relay_lag_seconds and backstop_relay_lag_events {checkpoint,
// stream, sink}.
type relayGauges struct {
	sinkPending, sinkDead, cpEvents metric.Int64ObservableGauge
	sinkLag, cpLag                  metric.Float64ObservableGauge
}

// sinkQueuePrefix starts a sink's queue (backstop.SinkQueue).
const sinkQueuePrefix = "sink."

func newRelayGauges(m metric.Meter) (*relayGauges, error) {
	var g relayGauges
	var err error
	if g.sinkPending, err = m.Int64ObservableGauge("backstop.sink.pending_messages", metric.WithUnit("{message}"),
		metric.WithDescription("Outbox messages of a sink not delivered yet (scheduled, pending, buffered or running).")); err != nil {
		return nil, err
	}
	if g.sinkLag, err = m.Float64ObservableGauge("backstop.sink.lag", metric.WithUnit("s"),
		metric.WithDescription("How long a sink's oldest claimable message has waited since it became due (0: none).")); err != nil {
		return nil, err
	}
	if g.sinkDead, err = m.Int64ObservableGauge("backstop.sink.dead_messages", metric.WithUnit("{message}"),
		metric.WithDescription("A sink's open dead letters: messages refused or out of attempts, waiting for an operator.")); err != nil {
		return nil, err
	}
	if g.cpLag, err = m.Float64ObservableGauge("backstop.relay.lag", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest event an event-log relay checkpoint has not published yet (0: caught up).")); err != nil {
		return nil, err
	}
	if g.cpEvents, err = m.Int64ObservableGauge("backstop.relay.lag_events", metric.WithUnit("{event}"),
		metric.WithDescription("Events of a checkpoint's stream after its cursor, counted up to 1000.")); err != nil {
		return nil, err
	}
	return &g, nil
}

func (g *relayGauges) instruments() []metric.Observable {
	return []metric.Observable{g.sinkPending, g.sinkLag, g.sinkDead, g.cpLag, g.cpEvents}
}

func (g *relayGauges) observe(o metric.Observer, snap *store.GaugeSnapshot, now time.Time) {
	sinks := map[string]bool{}
	for q := range snap.Tasks {
		sinks[q] = strings.HasPrefix(q, sinkQueuePrefix)
	}
	for q := range snap.DeadLetters {
		sinks[q] = strings.HasPrefix(q, sinkQueuePrefix)
	}
	for q, ok := range sinks {
		if !ok {
			continue
		}
		at := metric.WithAttributes(attribute.String("sink", strings.TrimPrefix(q, sinkQueuePrefix)))
		var pending int
		for _, st := range []bt.State{bt.StateScheduled, bt.StatePending, bt.StateBuffered, bt.StateRunning} {
			pending += snap.Tasks[q][st]
		}
		o.ObserveInt64(g.sinkPending, int64(pending), at)
		lag := 0.0
		if t, ok := snap.OldestPending[q]; ok {
			lag = max(now.Sub(t), 0).Seconds()
		}
		o.ObserveFloat64(g.sinkLag, lag, at)
		o.ObserveInt64(g.sinkDead, int64(snap.DeadLetters[q][bt.DLQOpen]), at)
	}
	for _, c := range snap.RelayCheckpoints {
		at := metric.WithAttributes(attribute.String("checkpoint", c.Name), attribute.String("stream", c.Stream), attribute.String("sink", c.Sink))
		lag := 0.0
		if c.OldestEvent != nil {
			lag = max(now.Sub(*c.OldestEvent), 0).Seconds()
		}
		o.ObserveFloat64(g.cpLag, lag, at)
		o.ObserveInt64(g.cpEvents, c.EventsBehind, at)
	}
}

// WithRelayCheckpoints adds the event-log relay's checkpoints read returns
// (internal/relay's CheckpointGauges) to a store's gauge query.
func WithRelayCheckpoints(r store.GaugeReader, read func(context.Context) ([]store.RelayCheckpointGauge, error)) store.GaugeReader {
	return relayReader{r, read}
}

type relayReader struct {
	store.GaugeReader
	read func(context.Context) ([]store.RelayCheckpointGauge, error)
}

func (r relayReader) Gauges(ctx context.Context) (*store.GaugeSnapshot, error) {
	snap, err := r.GaugeReader.Gauges(ctx)
	if err != nil {
		return nil, err
	}
	if snap.RelayCheckpoints, err = r.read(ctx); err != nil {
		return nil, err
	}
	return snap, nil
}
