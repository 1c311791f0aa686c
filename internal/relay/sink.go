package relay

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/backstophq/backstop"
)

// Delivery is one message on its way to a sink: the message's id (the
// broker's de-duplication id), its topic, key, headers and payload. The
// headers hold the message's own, Backstop-Message-Id, the W3C traceparent
// of its producer and each correlation attribute as Backstop-Attr-<key>.
type Delivery struct {
	ID      string
	Topic   string
	Key     string
	Headers map[string]string
	Payload []byte
	// Cover is the subject (a NATS wildcard may be) the NATS sink adds to
	// its stream when no stream covers Topic. Default: Topic.
	Cover string

	// Duplicate is set by Deliver when the broker acknowledged the
	// delivery as a repeat of an id it already holds (JetStream's
	// de-duplication by Nats-Msg-Id); Kafka and webhooks never set it.
	Duplicate bool
}

// A Sink delivers messages to one destination. Deliver returns nil once the
// destination acknowledged the message, a backstop.Permanent error when it
// refused it for good (the message dead-letters with that error), any
// other error to be retried by the sink's policy. Sinks are safe for
// concurrent use.
type Sink interface {
	Deliver(ctx context.Context, d *Delivery) error
	Close() error
}

// Options are a sink's settings beside its URL.
type Options struct {
	// Timeout bounds one delivery. Default: 10s.
	Timeout time.Duration
	// Secret signs webhook bodies (Backstop-Signature); unused by NATS
	// and Kafka.
	Secret string
	// Stream is the JetStream stream the relay creates when no stream
	// covers a subject. Default: BACKSTOP_<NAME> (NatsStreamName).
	Stream string
}

// DefaultTimeout is Options.Timeout's default.
const DefaultTimeout = 10 * time.Second

// Schemes are the sink URL schemes.
var Schemes = []string{"nats", "kafka", "http", "https"}

// ParseURL checks a sink URL: one of Schemes with a host.
func ParseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%q is not a URL: %v", raw, err)
	}
	switch u.Scheme {
	case "nats", "kafka", "http", "https":
	default:
		return nil, fmt.Errorf("%q: scheme must be one of nats://, kafka://, http://, https://", raw)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%q: missing host", raw)
	}
	return u, nil
}

// ParseSpec reads a --sink flag's NAME=URL.
func ParseSpec(spec string) (name, rawURL string, err error) {
	name, rawURL, ok := strings.Cut(spec, "=")
	if !ok || name == "" || rawURL == "" {
		return "", "", fmt.Errorf("--sink %q: want NAME=URL (e.g. bus=nats://127.0.0.1:4222)", spec)
	}
	if err := ValidName(name); err != nil {
		return "", "", fmt.Errorf("--sink %q: %v", spec, err)
	}
	if _, err := ParseURL(rawURL); err != nil {
		return "", "", fmt.Errorf("--sink %s: %v", name, err)
	}
	return name, rawURL, nil
}

// ValidName checks a sink name: its queue, sink.<name>, must be a valid
// queue name.
func ValidName(name string) error {
	_, err := backstop.SinkQueueName(name)
	return err
}

// Open connects a sink. A broker that is down does not fail Open: its
// deliveries fail (and are retried) until it is up.
func Open(ctx context.Context, name, rawURL string, o Options) (Sink, error) {
	u, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	switch u.Scheme {
	case "nats":
		return openNATS(u, name, o)
	case "kafka":
		return openKafka(u, o)
	default:
		return openWebhook(u, o), nil
	}
}

var errClosed = errors.New("sink closed")
