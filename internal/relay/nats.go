package relay

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop"
)

// natsSink publishes to NATS JetStream: topic = subject, the message id as
// Nats-Msg-Id (the stream's de-duplication within its duplicate window),
// the key as the Backstop-Key header.
type natsSink struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream string
	o      Options

	mu sync.Mutex // serializes the stream's creation and subject additions
}

var streamNameBad = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// NatsStreamName is the JetStream stream the relay creates for sink name
// when no stream covers a message's subject: BACKSTOP_<NAME>, upper-cased,
// characters other than letters, digits, '_' and '-' replaced by '_'.
func NatsStreamName(name string) string {
	return "BACKSTOP_" + strings.ToUpper(streamNameBad.ReplaceAllString(name, "_"))
}

func openNATS(u *url.URL, name string, o Options) (Sink, error) {
	server := *u
	server.RawQuery = ""
	nc, err := nats.Connect(server.String(), nats.Name("backstop relay "+name),
		nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1),
		// A publish while disconnected fails at once (and is retried by
		// the sink's policy) instead of waiting in a buffer.
		nats.ReconnectBufSize(-1))
	if err != nil {
		return nil, fmt.Errorf("nats %s: %w", server.Redacted(), err)
	}
	// An asynchronous publish (DeliverBatch) unanswered within the
	// sink's timeout fails rather than waiting for ever.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(o.Timeout))
	if err != nil {
		nc.Close()
		return nil, err
	}
	stream := o.Stream
	if s := u.Query().Get("stream"); s != "" {
		stream = s
	}
	return &natsSink{nc: nc, js: js, stream: cmpOr(stream, NatsStreamName(name)), o: o}, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (s *natsSink) Deliver(ctx context.Context, d *Delivery) error {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	m := natsMsg(d)
	ack, err := s.js.PublishMsg(ctx, m, jetstream.WithMsgID(d.ID), jetstream.WithRetryAttempts(1))
	if errors.Is(err, jetstream.ErrNoStreamResponse) && s.nc.IsConnected() {
		// No stream covers the subject: cover it, then publish again.
		if err = s.cover(ctx, cmpOr(d.Cover, d.Topic)); err == nil {
			ack, err = s.js.PublishMsg(ctx, m, jetstream.WithMsgID(d.ID), jetstream.WithRetryAttempts(1))
		}
	}
	if err == nil {
		d.Duplicate = ack.Duplicate
	}
	return classifyNATS(err)
}

// DeliverBatch implements BatchSink: every message is published
// asynchronously, then the acknowledgements are awaited (within the
// sink's timeout). A message no stream covers is delivered again by
// Deliver, which covers its subject.
func (s *natsSink) DeliverBatch(ctx context.Context, ds []*Delivery) []error {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	errs := make([]error, len(ds))
	futs := make([]jetstream.PubAckFuture, len(ds))
	for i, d := range ds {
		futs[i], errs[i] = s.js.PublishMsgAsync(natsMsg(d), jetstream.WithMsgID(d.ID), jetstream.WithRetryAttempts(1))
	}
	for i, f := range futs {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			ds[i].Duplicate = ack.Duplicate
		case errs[i] = <-f.Err():
		case <-ctx.Done():
			errs[i] = context.Cause(ctx)
		}
	}
	for i, err := range errs {
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
			errs[i] = s.Deliver(ctx, ds[i])
			continue
		}
		errs[i] = classifyNATS(err)
	}
	return errs
}

func natsMsg(d *Delivery) *nats.Msg {
	m := &nats.Msg{Subject: d.Topic, Data: d.Payload, Header: nats.Header{}}
	for k, v := range d.Headers {
		m.Header.Set(k, v)
	}
	if d.Key != "" {
		m.Header.Set("Backstop-Key", d.Key)
	}
	return m
}

// cover adds subject to the relay's stream, creating it when it does not
// exist.
func (s *natsSink) cover(ctx context.Context, subject string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.js.Stream(ctx, s.stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = s.js.CreateStream(ctx, jetstream.StreamConfig{Name: s.stream, Subjects: []string{subject}})
		return err
	}
	if err != nil {
		return err
	}
	cfg := st.CachedInfo().Config
	if slices.Contains(cfg.Subjects, subject) {
		return nil
	}
	cfg.Subjects = append(cfg.Subjects, subject)
	_, err = s.js.UpdateStream(ctx, cfg)
	return err
}

// classifyNATS: what the server or client refuses for good (too large, a
// bad subject, a JetStream API error in the 4xx class) is permanent;
// timeouts, disconnections and the rest are retried.
func classifyNATS(err error) error {
	if err == nil {
		return nil
	}
	var api *jetstream.APIError
	switch {
	case errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadSubject),
		errors.Is(err, nats.ErrInvalidMsg), errors.Is(err, nats.ErrHeadersNotSupported):
		return backstop.Permanent(err)
	case errors.As(err, &api) && api.Code >= 400 && api.Code < 500 && api.Code != 408 && api.Code != 429:
		return backstop.Permanent(err)
	}
	return err
}

func (s *natsSink) Close() error {
	s.nc.Close()
	return nil
}
