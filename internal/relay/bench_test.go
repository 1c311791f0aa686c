package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/relay"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testnats"
	"github.com/backstophq/backstop/store"
)

// The relay's throughput next to the floor, a plain client publishing the
// same messages with acknowledgements to the same broker, with as many in
// flight as the relay has (relay.Config's default Concurrency, 16):
//
//	go test -run '^$' -bench 'Relay|Plain' -benchtime 2000x ./internal/relay/
//
// Each iteration is one message; the relay's figure times delivery of
// messages already committed to the outbox (claim, publish with its ack,
// settle), spread over 100 keys (keyed) or without keys (unkeyed).
// docs/benchmarks.md has the figures.

const benchKeys = 100

// benchMessages publishes n messages of keys keys (0: none) to sink's outbox.
func benchMessages(b *testing.B, c *backstop.Client, sink, topic string, n, keys int) {
	b.Helper()
	const batch = 500
	for i := 0; i < n; i += batch {
		var msgs []backstop.Message
		for j := i; j < min(n, i+batch); j++ {
			msgs = append(msgs, backstop.Message{Sink: sink, Topic: topic, Key: benchKey(j, keys),
				Payload: []byte(fmt.Sprintf(`{"n":%d}`, j))})
		}
		if _, err := c.Publish(context.Background(), msgs...); err != nil {
			b.Fatal(err)
		}
	}
}

// benchRelay times the relay delivering n outbox messages of sink, done
// when landed() reaches n.
func benchRelay(b *testing.B, c *backstop.Client, name string, s relay.Sink, landed func() int) {
	b.Helper()
	r, err := relay.New(c, relay.Config{Sinks: map[string]relay.Sink{name: s}, Logger: slog.New(slog.DiscardHandler),
		Worker: backstop.WorkerConfig{PollInterval: 20 * time.Millisecond}})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	if err := r.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Minute)
	for landed() < b.N {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d landed", landed(), b.N)
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		b.Fatal(err)
	}
}

// plainPublish times publish(i) for i in [0, b.N) on 16 goroutines.
func plainPublish(b *testing.B, publish func(ctx context.Context, i int) error) {
	b.Helper()
	b.ResetTimer()
	var wg sync.WaitGroup
	next := make(chan int)
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := publish(context.Background(), i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := 0; i < b.N; i++ {
		select {
		case next <- i:
		case err := <-errs:
			b.Fatal(err)
		}
	}
	close(next)
	wg.Wait()
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func natsStreamCount(b *testing.B, url, stream string) func() int {
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	return func() int {
		st, err := js.Stream(context.Background(), stream)
		if err != nil {
			return 0
		}
		info, err := st.Info(context.Background())
		if err != nil {
			return 0
		}
		return int(info.State.Msgs)
	}
}

func BenchmarkRelayNATS(b *testing.B) {
	benchEachStore(b, func(b *testing.B, db string, keys int) {
		ns := testnats.Start(b, -1, b.TempDir())
		c := client(b, db, nil)
		benchMessages(b, c, "bus", "bench.relay", b.N, keys)
		s, err := relay.Open(context.Background(), "bus", ns.ClientURL(), relay.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		benchRelay(b, c, "bus", s, natsStreamCount(b, ns.ClientURL(), relay.NatsStreamName("bus")))
	})
}

// BenchmarkPlainNATS is the floor: nats.go's JetStream publish, acked, with
// the message id the relay sets.
func BenchmarkPlainNATS(b *testing.B) {
	ns := testnats.Start(b, -1, b.TempDir())
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "PLAIN", Subjects: []string{"bench.plain"}}); err != nil {
		b.Fatal(err)
	}
	plainPublish(b, func(ctx context.Context, i int) error {
		m := &nats.Msg{Subject: "bench.plain", Data: []byte(fmt.Sprintf(`{"n":%d}`, i)), Header: nats.Header{}}
		m.Header.Set("Backstop-Key", fmt.Sprintf("k%03d", i%benchKeys))
		_, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(fmt.Sprintf("plain-%d", i)))
		return err
	})
}

func BenchmarkRelayKafka(b *testing.B) {
	benchEachStore(b, func(b *testing.B, db string, keys int) {
		kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "bench-relay"))
		if err != nil {
			b.Fatal(err)
		}
		defer kc.Close()
		addr := kc.ListenAddrs()[0]
		c := client(b, db, nil)
		benchMessages(b, c, "log", "bench-relay", b.N, keys)
		s, err := relay.Open(context.Background(), "log", "kafka://"+addr, relay.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		var (
			mu     sync.Mutex
			landed int
		)
		cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("bench-relay"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			b.Fatal(err)
		}
		defer cons.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			for ctx.Err() == nil {
				n := cons.PollFetches(ctx).NumRecords()
				mu.Lock()
				landed += n
				mu.Unlock()
			}
		}()
		benchRelay(b, c, "log", s, func() int { mu.Lock(); defer mu.Unlock(); return landed })
	})
}

// BenchmarkPlainKafka is the floor: franz-go's ProduceSync of keyed
// records to the same kfake cluster.
func BenchmarkPlainKafka(b *testing.B) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "bench-plain"))
	if err != nil {
		b.Fatal(err)
	}
	defer kc.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()[0]), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	plainPublish(b, func(ctx context.Context, i int) error {
		r := &kgo.Record{Topic: "bench-plain", Key: []byte(fmt.Sprintf("k%03d", i%benchKeys)), Value: []byte(fmt.Sprintf(`{"n":%d}`, i))}
		return cl.ProduceSync(ctx, r).FirstErr()
	})
}

// benchEachStore runs bench on a fresh SQLite file and a fresh Postgres
// schema (skipped without a server, as the tests are), with messages of
// 100 keys and without keys.
func benchEachStore(b *testing.B, bench func(b *testing.B, db string, keys int)) {
	for _, st := range []struct {
		name string
		db   func(testing.TB) string
	}{{"sqlite", testdb.SQLite}, {"postgres", testdb.Postgres}} {
		b.Run(st.name+"/keyed", func(b *testing.B) { bench(b, st.db(b), benchKeys) })
		b.Run(st.name+"/unkeyed", func(b *testing.B) { bench(b, st.db(b), 0) })
	}
}

func benchKey(j, keys int) string {
	if keys == 0 {
		return ""
	}
	return fmt.Sprintf("k%03d", j%keys)
}

// BenchmarkEventRelayNATS times the event-log relay publishing b.N events
// already in the log (stream all, reads of 500) to JetStream: batched, a
// read's events published asynchronously and their acks awaited together
// (the NATS sink is a BatchSink), against one at a time, one round trip
// each (the same sink with its DeliverBatch hidden):
//
//	go test -run '^$' -bench EventRelayNATS -benchtime 5000x ./internal/relay/
func BenchmarkEventRelayNATS(b *testing.B) {
	for _, st := range []struct {
		name string
		db   func(testing.TB) string
	}{{"sqlite", testdb.SQLite}, {"postgres", testdb.Postgres}} {
		for _, mode := range []string{"one_at_a_time", "batched"} {
			b.Run(st.name+"/"+mode, func(b *testing.B) {
				ns := testnats.Start(b, -1, b.TempDir())
				c := client(b, st.db(b), nil)
				ctx := context.Background()
				for i := 0; i < b.N; i += 500 {
					var evs []backstop.Event
					for j := i; j < min(b.N, i+500); j++ {
						evs = append(evs, store.NewEvent(time.Now(), "bench.event", fmt.Sprintf("s%d", j%100), "q", "k", "",
							[]byte(fmt.Sprintf(`{"n":%d}`, j))))
					}
					if err := c.Store().AppendEvents(ctx, evs); err != nil {
						b.Fatal(err)
					}
				}
				s, err := relay.Open(ctx, "bus", ns.ClientURL(), relay.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				if mode == "one_at_a_time" {
					s = struct{ relay.Sink }{s}
				}
				landed := natsStreamCount(b, ns.ClientURL(), relay.NatsStreamName("bus"))
				r, err := relay.NewEvents(c, relay.EventsConfig{Sink: s, SinkName: "bus", Checkpoint: "bench", Streams: []string{"all"},
					PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				if err := r.Start(ctx); err != nil {
					b.Fatal(err)
				}
				deadline := time.Now().Add(5 * time.Minute)
				for landed() < b.N {
					if time.Now().After(deadline) {
						b.Fatalf("%d of %d landed", landed(), b.N)
					}
					time.Sleep(20 * time.Millisecond)
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
				sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				if err := r.Stop(sctx); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
