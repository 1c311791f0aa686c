package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
)

func init() { register(publishCmd) }

type publishFlags struct {
	sink, topic, key, payload string
	headers, attrs            []string
}

func publishCmd(a *app) *cobra.Command {
	var f publishFlags
	cmd := &cobra.Command{
		Use:   "publish --sink NAME --topic T [--key K] [--header k=v]... --payload JSON",
		Short: "Write an outbox message for the relay to deliver to a sink",
		Long: `publish writes one outbox message: a task of kind backstop.message on the queue
sink.NAME, delivered by "backstop relay" to the sink NAME (NATS JetStream, Kafka or a
webhook; docs/brokers.md). Messages with one --key reach the broker one at a time, in
publish order. --header adds a broker header (repeatable), --attr a correlation
attribute (sent as the header Backstop-Attr-<key>).

Table output is the message id (the broker's de-duplication id); JSON output is
{"id", "sink", "task"}. Bad input exits 2 and writes nothing.`,
		Example: `  backstop publish --sink bus --topic orders.created --key order-42 --payload '{"id":42}'
  backstop publish --server http://127.0.0.1:8080 --sink hook --topic invoice.paid --header X-Tenant=acme --payload '{}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.publish(cmd.Context(), &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.sink, "sink", "", "the sink to deliver to (required)")
	fl.StringVar(&f.topic, "topic", "", "NATS subject, Kafka topic, or the webhook's Backstop-Topic header (required)")
	fl.StringVar(&f.key, "key", "", "message key: one key's messages are delivered in publish order (Kafka record key)")
	fl.StringArrayVar(&f.headers, "header", nil, "broker header name=value (repeatable)")
	fl.StringArrayVar(&f.attrs, "attr", nil, "correlation attribute key=value (repeatable)")
	fl.StringVar(&f.payload, "payload", "", "the message body: JSON (required)")
	return cmd
}

func (a *app) publish(ctx context.Context, f *publishFlags) error {
	for _, r := range []struct{ flag, v string }{{"--sink", f.sink}, {"--topic", f.topic}, {"--payload", f.payload}} {
		if r.v == "" {
			return usageErr("publish: %s is required", r.flag)
		}
	}
	m := backstop.Message{Sink: f.sink, Topic: f.topic, Key: f.key, Payload: json.RawMessage(f.payload)}
	for _, h := range f.headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok {
			return usageErr("--header %q: want name=value", h)
		}
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		if _, dup := m.Headers[k]; dup {
			return usageErr("--header: %q is given twice", k)
		}
		m.Headers[k] = v
	}
	var err error
	if m.Attributes, err = parseAttrs(f.attrs); err != nil {
		return err
	}
	b, err := a.backend(ctx, nil)
	if err != nil {
		return err
	}
	defer b.Close()
	res, err := b.Publish(cliActor(ctx), m)
	if err != nil {
		return err
	}
	return a.print(publishJSON{ID: res.Task.ID, Sink: m.Sink, Task: newTaskJSON(res.Task, false)}, func(w io.Writer) error {
		_, err := fmt.Fprintln(w, res.Task.ID)
		return err
	})
}

// publishJSON is publish's JSON output: POST /v1/messages's response.
type publishJSON struct {
	ID   string   `json:"id"`
	Sink string   `json:"sink"`
	Task taskJSON `json:"task"`
}

func (l *localBackend) Publish(ctx context.Context, m backstop.Message) (*backstop.EnqueueResult, error) {
	rs, err := l.Client.Publish(ctx, m)
	if err != nil {
		return nil, err
	}
	rs[0].Task = l.out(rs[0].Task)
	return &rs[0], nil
}

func (r *remoteBackend) Publish(ctx context.Context, m backstop.Message) (*backstop.EnqueueResult, error) {
	// Checked here as on the database: a body that is not JSON cannot
	// even be sent.
	if err := m.Validate(); err != nil {
		return nil, err
	}
	res, err := r.cl.Publish(ctx, api.MessageRequest{Sink: m.Sink, Topic: m.Topic, Key: m.Key, Headers: m.Headers,
		Payload: m.Payload, Attributes: m.Attributes})
	if err != nil {
		return nil, remoteErr(err)
	}
	return &backstop.EnqueueResult{Task: taskFromView(res.Task)}, nil
}
