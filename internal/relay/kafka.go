package relay

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/backstophq/backstop"
)

// kafkaSink produces to Kafka with franz-go's idempotent producer (its
// default: acks from all in-sync replicas, sequence numbers per partition,
// so a retried produce is written once): topic = Kafka topic, key = record
// key (so one key stays on one partition, in order).
type kafkaSink struct {
	cl *kgo.Client
	o  Options
}

// openKafka: kafka://HOST:PORT, more brokers in ?brokers=H:P,H:P.
func openKafka(u *url.URL, o Options) (Sink, error) {
	seeds := []string{u.Host}
	if more := u.Query().Get("brokers"); more != "" {
		seeds = append(seeds, strings.Split(more, ",")...)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...),
		kgo.AllowAutoTopicCreation(),
		kgo.ProducerLinger(0),
		// A record not acknowledged within the delivery timeout fails (and
		// is retried by the sink's policy); a partition's later records
		// fail with it, so nothing overtakes it.
		kgo.RecordDeliveryTimeout(o.Timeout))
	if err != nil {
		return nil, fmt.Errorf("kafka %s: %w", u.Host, err)
	}
	return &kafkaSink{cl: cl, o: o}, nil
}

func (s *kafkaSink) Deliver(ctx context.Context, d *Delivery) error {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	return classifyKafka(s.cl.ProduceSync(ctx, kafkaRecord(d)).FirstErr())
}

// DeliverBatch implements BatchSink: every record is produced (franz-go
// groups them by partition into produce requests), then the promises are
// awaited.
func (s *kafkaSink) DeliverBatch(ctx context.Context, ds []*Delivery) []error {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	errs := make([]error, len(ds))
	var wg sync.WaitGroup
	wg.Add(len(ds))
	for i, d := range ds {
		s.cl.Produce(ctx, kafkaRecord(d), func(_ *kgo.Record, err error) {
			errs[i] = classifyKafka(err)
			wg.Done()
		})
	}
	wg.Wait()
	return errs
}

func kafkaRecord(d *Delivery) *kgo.Record {
	r := &kgo.Record{Topic: d.Topic, Value: d.Payload}
	if d.Key != "" {
		r.Key = []byte(d.Key)
	}
	for k, v := range d.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return r
}

// classifyKafka: an error Kafka says retrying cannot fix (too large, an
// invalid topic, not authorized) is permanent; the rest is retried.
func classifyKafka(err error) error {
	if err == nil {
		return nil
	}
	var ke *kerr.Error
	if errors.As(err, &ke) && !ke.Retriable {
		return backstop.Permanent(err)
	}
	return err
}

func (s *kafkaSink) Close() error {
	s.cl.Close()
	return nil
}
