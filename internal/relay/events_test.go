package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/relay"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testmetric"
	"github.com/backstophq/backstop/internal/testnats"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// startEvents runs an event relay until Stop or the test's end.
func startEvents(t *testing.T, c *backstop.Client, cfg relay.EventsConfig) *relay.EventRelay {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.PollInterval = 20 * time.Millisecond
	r, err := relay.NewEvents(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopEvents(t, r) })
	return r
}

func stopEvents(t *testing.T, r *relay.EventRelay) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		t.Error(err)
	}
}

// enqueueN enqueues n tasks on queue (each writes a task.enqueued event).
func enqueueN(t *testing.T, c *backstop.Client, queue string, n int) {
	t.Helper()
	for i := range n {
		if _, err := c.Enqueue(context.Background(), backstop.EnqueueParams{Queue: queue, Kind: "k", Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
}

// streamEvents reads every event of stream (ids in log order).
func streamEvents(t *testing.T, c *backstop.Client, stream string) []backstop.Event {
	t.Helper()
	var out []backstop.Event
	after := ""
	for {
		page, err := c.ReadEvents(context.Background(), backstop.ReadEventsParams{Stream: stream, After: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page.Events...)
		if len(page.Events) < 1000 {
			return out
		}
		after = page.Next
	}
}

func ids(evs []backstop.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// The event relay publishes a stream's events to JetStream in log order,
// each once (Nats-Msg-Id = the event id), as the masked envelope on
// backstop.events.<type>, into the stream it creates for backstop.events.>;
// a restart resumes from the checkpoint with nothing skipped; a checkpoint
// behind the broker (a crash between publish and checkpoint) publishes
// again, and the broker removes every repeat, counted.
func TestEventRelayNATS(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ctx := context.Background()
		ns := testnats.Start(t, -1, t.TempDir())
		c := client(t, db, nil)
		sink := openSink(t, "bus", ns.ClientURL(), relay.Options{})
		enqueueN(t, c, "q1", 20)
		enqueueN(t, c, "q2", 5)
		secret := store.NewEvent(time.Now(), "custom.note", "subject-1", "q1", "k", "", json.RawMessage(`{"password":"hunter2","n":1}`))
		if err := c.Store().AppendEvents(ctx, []backstop.Event{secret}); err != nil {
			t.Fatal(err)
		}
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		cfg := relay.EventsConfig{Sink: sink, SinkName: "bus", Checkpoint: "feed", Streams: []string{"queue.q1"}, Batch: 7, MeterProvider: mp}
		r := startEvents(t, c, cfg)
		wantAll := func() []string { return ids(streamEvents(t, c, "queue.q1")) }
		read := func() []streamMsg { return readStream(t, ns.ClientURL(), relay.NatsStreamName("bus")) }
		testwait.For(t, "the first events in the stream", func() bool { return len(read()) == 21 })
		stopEvents(t, r)

		got := read()
		for _, m := range got {
			if m.subject == "backstop.events.custom.note" {
				if strings.Contains(string(m.data), "hunter2") || !strings.Contains(string(m.data), `"n":1`) {
					t.Fatalf("the event's body is not masked: %s", m.data)
				}
				continue
			}
			var e backstop.Event
			if err := json.Unmarshal(m.data, &e); err != nil || m.subject != "backstop.events."+e.Type || e.Queue != "q1" ||
				m.id != e.ID || m.headers.Get(relay.EventTypeHeader) != e.Type || m.headers.Get(relay.EventCursorHeader) != e.Cursor {
				t.Fatalf("stream message %+v: %v", m, err)
			}
		}

		// More events while it is stopped: a new relay resumes after the
		// checkpoint.
		enqueueN(t, c, "q1", 10)
		r = startEvents(t, c, cfg)
		testwait.For(t, "the later events in the stream", func() bool { return len(read()) == 31 })
		stopEvents(t, r)
		checkIDs(t, read(), wantAll())
		cp, err := c.Store().RelayCheckpoint(ctx, "feed", "queue.q1")
		if err != nil || cp.Published != 31 || cp.Duplicates != 0 || cp.Sink != "bus" || cp.LastError != "" {
			t.Fatalf("checkpoint %+v, %v", cp, err)
		}

		// The checkpoint behind the broker (the relay died after the
		// broker's acks, before saving): every event is published again,
		// and JetStream drops each repeat.
		if err := c.Store().SaveRelayCheckpoint(ctx, store.RelayCheckpointUpdate{Name: "feed", Stream: "queue.q1", Sink: "bus", Cursor: "", Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		enqueueN(t, c, "q1", 3)
		r = startEvents(t, c, cfg)
		testwait.For(t, "the checkpoint to catch up", func() bool {
			cp, err = c.Store().RelayCheckpoint(ctx, "feed", "queue.q1")
			return err == nil && cp.Published == 31+34
		})
		stopEvents(t, r)
		checkIDs(t, read(), wantAll())
		if cp.Duplicates != 31 {
			t.Fatalf("checkpoint counted %d duplicates, want 31", cp.Duplicates)
		}
		labels := "checkpoint=feed,sink=bus"
		testmetric.Expect(t, testmetric.Collect(t, reader), map[string]map[string]int64{
			"backstop.relay.events.published":  {labels: 21 + 10 + 34},
			"backstop.relay.events.duplicates": {labels: 31},
		})
	})
}

// checkIDs: the stream holds want's ids, each once, in want's order.
func checkIDs(t *testing.T, got []streamMsg, want []string) {
	t.Helper()
	g := make([]string, len(got))
	for i, m := range got {
		g[i] = m.id
	}
	if strings.Join(g, ",") != strings.Join(want, ",") {
		t.Fatalf("the broker holds %d events\n%v\nwant %d\n%v", len(g), g, len(want), want)
	}
}

// The event relay on Kafka (kfake, in-process): every event of the log
// on one topic, in log order, keyed by its subject, with the event id in
// Backstop-Message-Id; a restart resumes from the checkpoint.
func TestEventRelayKafka(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ctx := context.Background()
		kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "backstop.events"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(kc.Close)
		addr := kc.ListenAddrs()[0]
		c := client(t, db, nil)
		sink := openSink(t, "log", "kafka://"+addr, relay.Options{})
		enqueueN(t, c, "q", 15)
		cfg := relay.EventsConfig{Sink: sink, SinkName: "log", Checkpoint: "log", Streams: []string{"all"}, Topic: "backstop.events", Batch: 4}
		r := startEvents(t, c, cfg)
		cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("backstop.events"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		var got []streamMsg
		poll := func(n int) {
			deadline := time.Now().Add(time.Minute)
			for len(got) < n && time.Now().Before(deadline) {
				fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				fs := cons.PollFetches(fctx)
				cancel()
				fs.EachRecord(func(rec *kgo.Record) {
					m := streamMsg{key: string(rec.Key), subject: rec.Topic, data: rec.Value}
					for _, h := range rec.Headers {
						if h.Key == "Backstop-Message-Id" {
							m.id = string(h.Value)
						}
					}
					got = append(got, m)
				})
			}
		}
		poll(15)
		stopEvents(t, r)
		enqueueN(t, c, "q", 6)
		startEvents(t, c, cfg)
		// Every event committed before it is read: the relay publishes a
		// batch at once, so it may be ahead of a read that came too soon.
		testwait.For(t, "the 21 events to be readable", func() bool { return len(streamEvents(t, c, "all")) == 21 })
		want := streamEvents(t, c, "all")
		poll(len(want))
		checkIDs(t, got, ids(want))
		for i, m := range got {
			if m.key != want[i].Subject {
				t.Fatalf("record %d key %q, want the subject %q", i, m.key, want[i].Subject)
			}
		}
	})
}

// Bad --streams and topics are refused with a message naming the problem.
func TestParseStreams(t *testing.T) {
	for _, bad := range []string{"", "all,queue.q", "queue.q,queue.q", "nope", "queue.", "queue.q,,type.t", "bogus.x"} {
		if _, err := relay.ParseStreams(bad); err == nil {
			t.Errorf("ParseStreams(%q) accepted", bad)
		}
	}
	got, err := relay.ParseStreams("queue.q, type.task.dead_lettered,run.r1")
	if err != nil || strings.Join(got, ",") != "queue.q,type.task.dead_lettered,run.r1" {
		t.Fatalf("ParseStreams: %v %v", got, err)
	}
	for _, bad := range []string{"", "a.{type}.b", "{type}", "a b", "a..b", "x.{type}.{type}", "a.>"} {
		if err := relay.CheckTopic(bad); err == nil {
			t.Errorf("CheckTopic(%q) accepted", bad)
		}
	}
	for _, ok := range []string{"backstop.events.{type}", "events", "my-app.events"} {
		if err := relay.CheckTopic(ok); err != nil {
			t.Errorf("CheckTopic(%q): %v", ok, err)
		}
	}
}
