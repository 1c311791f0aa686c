package engine

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/backstophq/backstop/workflow"
)

// Outbox messages (docs/brokers.md): a message is a task of kind
// MessageKind on its sink's queue, delivered by the relay.

// MessageKind is the kind of an outbox message's task.
const MessageKind = "backstop.message"

// SinkQueue is the queue of sink's messages: "sink.<sink>".
func SinkQueue(sink string) string { return "sink." + sink }

// MessageBody is a message task's payload: the message's topic, key,
// headers and payload.
type MessageBody struct {
	Topic   string            `json:"topic"`
	Key     string            `json:"key,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Payload json.RawMessage   `json:"payload"`
}

// MessageParams is the task that carries a message to sink. A keyed
// message is an ordered task: its ordering key is the message key and its
// sequence the time-ordered part of its UUIDv7 id, so one key's messages
// run one at a time in publish order.
func MessageParams(sink string, m MessageBody, attrs map[string]string) (EnqueueParams, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return EnqueueParams{}, err
	}
	body, err := json.Marshal(m)
	if err != nil {
		return EnqueueParams{}, Invalid("payload", "%v", err)
	}
	p := EnqueueParams{ID: id.String(), Queue: SinkQueue(sink), Kind: MessageKind, Payload: body, Attributes: attrs}
	if m.Key != "" {
		p.OrderingKey, p.Sequence = m.Key, MessageSequence(id)
	}
	return p, nil
}

// MessageSequence is a message id's place in publish order: the
// millisecond and sub-millisecond counter of its UUIDv7 (60 bits, so a
// positive int64, increasing with every id this process makes).
func MessageSequence(id uuid.UUID) int64 {
	ms := int64(id[0])<<40 | int64(id[1])<<32 | int64(id[2])<<24 | int64(id[3])<<16 | int64(id[4])<<8 | int64(id[5])
	return ms<<12 | int64(id[6]&0x0f)<<8 | int64(id[7])
}

// sinkParams are the message tasks of plan's Publish: each step result
// to its sink, its attributes the step task's, its trace context the
// run's (so the relay's delivery spans are in the run's trace).
func (e *Engine) sinkParams(ctx context.Context, rt *runTrace, plan workflow.Plan) ([]EnqueueParams, error) {
	if len(plan.Publish) == 0 {
		return nil, nil
	}
	var traceParent string
	if t := e.Telemetry; !t.tracesOff {
		if sc := t.runParent(ctx, plan.Run, traceForced(ctx) || rt.sampled[plan.Run.RunID]); sc.IsValid() {
			carrier := propagation.MapCarrier{}
			t.prop.Inject(trace.ContextWithRemoteSpanContext(context.WithoutCancel(ctx), sc), carrier)
			traceParent = carrier["traceparent"]
		}
	}
	out := make([]EnqueueParams, len(plan.Publish))
	for i, m := range plan.Publish {
		p, err := MessageParams(m.Sink, MessageBody{Topic: m.Topic, Key: m.Key, Payload: m.Payload}, m.Attributes)
		if err != nil {
			return nil, err
		}
		if m.ID != "" { // the step waits for this message: its id is the step's
			p.ID = m.ID
		}
		p.TraceParent = traceParent
		out[i] = p
	}
	return out, nil
}
