package relay

import (
	"context"
	"sync"
)

// A BatchSink delivers many messages at once: all are sent, then their
// acknowledgements awaited together (NATS JetStream's asynchronous
// publish, a Kafka produce of every record). The answer holds one error per
// delivery, in order, each with Deliver's meaning, so a refused message
// fails alone. Sinks without it (webhooks) deliver one message at a time.
type BatchSink interface {
	Sink
	DeliverBatch(ctx context.Context, ds []*Delivery) []error
}

// maxDeliveryBatch bounds one DeliverBatch.
const maxDeliveryBatch = 1000

// batcher gathers the deliveries that the relay's handlers make at the
// same time (the messages of one claim start together) into DeliverBatch
// calls. No goroutine of its own: the first caller to find it idle sends
// what is pending, then what queued meanwhile, while later callers wait
// for their answer. A key has one message in flight at a time (the
// engine's ordering admission), so a batch never holds two of one key and
// commit order per key is kept.
type batcher struct {
	s BatchSink

	mu      sync.Mutex
	pending []*batchReq
	sending bool
}

type batchReq struct {
	ctx  context.Context
	d    *Delivery
	err  error
	done chan struct{}
}

// deliver queues d and returns its delivery's answer.
func (b *batcher) deliver(ctx context.Context, d *Delivery) error {
	r := &batchReq{ctx: ctx, d: d, done: make(chan struct{})}
	b.mu.Lock()
	b.pending = append(b.pending, r)
	if !b.sending {
		b.sending = true
		for len(b.pending) > 0 {
			n := min(len(b.pending), maxDeliveryBatch)
			batch := b.pending[:n:n]
			b.pending = b.pending[n:]
			b.mu.Unlock()
			b.send(batch)
			b.mu.Lock()
		}
		b.sending = false
	}
	b.mu.Unlock()
	<-r.done
	return r.err
}

// send delivers a batch. Its context is the first caller's without its
// cancellation (the batch carries other handlers' messages); a handler
// whose own context ended is answered with that.
func (b *batcher) send(batch []*batchReq) {
	live := batch[:0:0]
	for _, r := range batch {
		if err := context.Cause(r.ctx); err != nil {
			r.err = err
			close(r.done)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	ds := make([]*Delivery, len(live))
	for i, r := range live {
		ds[i] = r.d
	}
	errs := b.s.DeliverBatch(context.WithoutCancel(live[0].ctx), ds)
	for i, r := range live {
		r.err = errs[i]
		close(r.done)
	}
}
