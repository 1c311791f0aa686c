package backstop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/internal/engine"
)

// MessageKind is the kind of an outbox message's task. A message is a task
// of this kind on its sink's queue (SinkQueue), so a message the sink
// refuses follows the task failure path: retries by the sink queue's
// policy, a dead letter with every attempt recorded, replay under the same
// id, redrive and discard.
const MessageKind = engine.MessageKind

// SinkQueue is the queue of sink's messages: "sink.<sink>".
func SinkQueue(sink string) string { return engine.SinkQueue(sink) }

// SinkQueueName is sink's queue, or an error when sink cannot be a sink
// name.
func SinkQueueName(sink string) (string, error) {
	if sink == "" {
		return "", errors.New("a sink name is required")
	}
	q := SinkQueue(sink)
	if engine.ValidName(q) != nil {
		return "", fmt.Errorf("sink name %q must be 1-123 characters of letters, digits, '_', '.', ':' or '-', starting with a letter or digit", sink)
	}
	return q, nil
}

// Message is an outbox message: written in the caller's transaction
// (PublishTx), delivered to its sink by `backstop relay` (docs/brokers.md).
// Its task's payload is the message's JSON form (topic, key, headers,
// payload); Sink names the queue and Attributes are the task's attributes.
type Message struct {
	// Sink names the destination (a sink of the relay's configuration).
	// Required.
	Sink string `json:"-"`
	// Topic: the NATS subject, the Kafka topic; sent to a webhook as the
	// Backstop-Topic header. Required.
	Topic string `json:"topic"`
	// Key: messages with one key reach the broker one at a time, in
	// publish order (the Kafka record key; a header elsewhere). Optional:
	// messages without a key are delivered concurrently.
	Key string `json:"key,omitempty"`
	// Headers travel as broker headers (NATS and Kafka headers, HTTP
	// headers of a webhook).
	Headers map[string]string `json:"headers,omitempty"`
	// Payload is the message body: JSON other than null. Required.
	Payload json.RawMessage `json:"payload"`
	// Attributes are the message task's correlation attributes; they
	// travel as Backstop-Attr-<key> headers.
	Attributes map[string]string `json:"-"`
}

// messageParams turns messages into the tasks that carry them
// (engine.MessageParams: a keyed message is an ordered task, in publish
// order).
func messageParams(msgs []Message) ([]EnqueueParams, error) {
	out := make([]EnqueueParams, len(msgs))
	for i, m := range msgs {
		if err := m.Validate(); err != nil {
			return nil, err
		}
		p, err := engine.MessageParams(m.Sink, engine.MessageBody{Topic: m.Topic, Key: m.Key, Headers: m.Headers, Payload: m.Payload}, m.Attributes)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// MessageSequence is a message id's place in publish order: the
// millisecond and sub-millisecond counter of its UUIDv7 (60 bits, so a
// positive int64, increasing with every id this process makes).
func MessageSequence(id uuid.UUID) int64 { return engine.MessageSequence(id) }

// Validate checks a message as PublishTx does: a ValidationError names
// the field (sink, topic, key, headers, payload).
func (m *Message) Validate() error {
	if _, err := SinkQueueName(m.Sink); err != nil {
		return invalid("sink", "%v", err)
	}
	if m.Topic == "" {
		return invalid("topic", "required")
	}
	if len(m.Topic) > 255 || strings.ContainsFunc(m.Topic, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return invalid("topic", "%q must be 1-255 characters without spaces or control characters", m.Topic)
	}
	if len(m.Key) > 1024 {
		return invalid("key", "must be at most 1024 bytes")
	}
	for k, v := range m.Headers {
		if !validHeaderName(k) {
			return invalid("headers", "%q is not a header name (letters, digits and !#$%%&'*+-.^_`|~)", k)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return invalid("headers", "the value of %q holds a line break or NUL", k)
		}
	}
	if b := bytes.TrimSpace(m.Payload); len(b) == 0 || string(b) == "null" {
		return invalid("payload", "required: a JSON value other than null")
	}
	if !json.Valid(m.Payload) {
		return invalid("payload", "not valid JSON")
	}
	return nil
}

// validHeaderName: an HTTP token (RFC 9110), which NATS and Kafka headers
// accept too.
func validHeaderName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// Publish writes messages in one transaction of its own.
func (c *Client) Publish(ctx context.Context, msgs ...Message) ([]EnqueueResult, error) {
	ps, err := messageParams(msgs)
	if err != nil {
		return nil, err
	}
	return c.EnqueueMany(ctx, ps)
}

// PublishTx writes messages inside the caller's transaction — a *sql.Tx,
// or on Postgres also a pgx.Tx — so they exist, and are delivered, if and
// only if it commits: the transactional outbox.
func (c *Client) PublishTx(ctx context.Context, tx any, msgs ...Message) ([]EnqueueResult, error) {
	ps, err := messageParams(msgs)
	if err != nil {
		return nil, err
	}
	return c.EnqueueTx(ctx, tx, ps...)
}
