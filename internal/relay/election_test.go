package relay_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/relay"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testnats"
	"github.com/backstophq/backstop/internal/testwait"
)

// countingSink counts the deliveries it passes on.
type countingSink struct {
	relay.Sink
	n atomic.Int64
}

func (s *countingSink) Deliver(ctx context.Context, d *relay.Delivery) error {
	s.n.Add(1)
	return s.Sink.Deliver(ctx, d)
}

// Two relays following one checkpoint: only the elected one publishes;
// when it stops, the other takes over from the checkpoint, and the broker
// holds every event once, in log order.
func TestEventRelayElection(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ns := testnats.Start(t, -1, t.TempDir())
		c := client(t, db, nil)
		read := func() []streamMsg { return readStream(t, ns.ClientURL(), relay.NatsStreamName("bus")) }
		cfg := func(id string, s relay.Sink) relay.EventsConfig {
			return relay.EventsConfig{Sink: s, SinkName: "bus", Checkpoint: "feed", Streams: []string{"queue.q"}, Batch: 5,
				LeaderTTL: time.Second, ID: id}
		}
		a := &countingSink{Sink: openSink(t, "bus", ns.ClientURL(), relay.Options{})}
		b := &countingSink{Sink: openSink(t, "bus", ns.ClientURL(), relay.Options{})}
		ra := startEvents(t, c, cfg("a", a))
		testwait.For(t, "a to lead", func() bool { return leaderOf(t, c) == "a" })
		startEvents(t, c, cfg("b", b))
		enqueueN(t, c, "q", 30)
		testwait.For(t, "the first events in the stream", func() bool { return len(read()) == 30 })
		if a.n.Load() != 30 || b.n.Load() != 0 {
			t.Fatalf("deliveries: a %d, b %d; want only the leader's", a.n.Load(), b.n.Load())
		}
		stopEvents(t, ra) // resigns: b takes over
		enqueueN(t, c, "q", 20)
		testwait.For(t, "the later events in the stream", func() bool { return len(read()) == 50 })
		if a.n.Load() != 30 || b.n.Load() != 20 {
			t.Fatalf("deliveries: a %d, b %d; want a 30 then b 20", a.n.Load(), b.n.Load())
		}
		checkIDs(t, read(), ids(streamEvents(t, c, "queue.q")))
	})
}

// leaderOf names the holder of the feed checkpoint's lease ("" none).
func leaderOf(t *testing.T, c *backstop.Client) string {
	t.Helper()
	st, err := c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range st.Leaders {
		if l.Name == relay.LeaseName("feed") {
			return l.LeaderID
		}
	}
	return ""
}
