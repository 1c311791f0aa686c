package ingest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/ingest"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
)

// Seed 001's uptime results from Kafka (kfake, in-process, on loopback):
// 10,000 results of 100 keys, shuffled over 4 partitions, some withheld.
// Every delivered result becomes one task on the ordered queue; a worker
// handles each key's results in sequence, and the gaps it is told of are
// exactly the withheld sequences.
func TestIngestKafkaOrdered(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		c := client(t, db)
		all, want, gaps := results(100, 100, 1)
		addr := kafkaCluster(t, "results", 4)
		produceKafka(t, addr, "results", all)
		start := time.Now()
		in, stop := run(t, c, mapping(t), ingest.Source{URL: "kafka://" + addr, Topic: "results", Group: "g1"})
		testwait.For(t, "every result enqueued", func() bool { return countTasks(t, c, orderedQueue) >= len(all) })
		testwait.For(t, "no lag", func() bool { return in.Lag() == 0 })
		stop()
		if n := countTasks(t, c, orderedQueue); n != len(all) {
			t.Fatalf("%d tasks, want %d", n, len(all))
		}
		t.Logf("ingested in %s", time.Since(start))
		work(t, c).check(t, len(all), want, gaps)
		t.Logf("handled in %s", time.Since(start))
	})
}

// The same from NATS JetStream (a real nats-server, in-process): a
// durable consumer, each message acked after its batch's enqueue.
func TestIngestNATSOrdered(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		c := client(t, db)
		all, want, gaps := results(100, 100, 2)
		url := natsServer(t, "RESULTS", "uptime.results")
		publishNATS(t, url, "uptime.results", values(all), nil)
		start := time.Now()
		in, stop := run(t, c, mapping(t), ingest.Source{URL: url, Subject: "uptime.results", Group: "g1"})
		testwait.For(t, "every result enqueued", func() bool { return countTasks(t, c, orderedQueue) >= len(all) })
		testwait.For(t, "no lag", func() bool { return in.Lag() == 0 })
		stop()
		if n := countTasks(t, c, orderedQueue); n != len(all) {
			t.Fatalf("%d tasks, want %d", n, len(all))
		}
		t.Logf("ingested in %s", time.Since(start))
		work(t, c).check(t, len(all), want, gaps)
		t.Logf("handled in %s", time.Since(start))
	})
}

// A redelivered message is an idempotent enqueue: the same message
// ingested twice (the id from a field, a header, or the broker position)
// is one task.
func TestRedeliveryIdempotent(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ctx := context.Background()
		c := client(t, db)
		msg := func(off int64) *ingest.Message {
			return &ingest.Message{Value: []byte(`{"check":{"id":"c-1","subscription":"s","minute":1}}`),
				Headers: map[string]string{"Msg-Id": "h-1"}, Header: func(n string) string { return map[string]string{"Msg-Id": "h-1"}[n] },
				Position: ingest.Position{Broker: "kafka", Topic: "t", Partition: 2, Offset: off}}
		}
		for _, tc := range []struct {
			name  string
			m     ingest.Mapping
			again *ingest.Message // the redelivery
		}{
			{"field", mapping(t), msg(8)},
			{"header", ingest.Mapping{Queue: "plain", Kind: "check", IDHeader: "Msg-Id"}, msg(8)},
			{"position", ingest.Mapping{Queue: "plain2", Kind: "check"}, msg(7)},
		} {
			in, err := ingest.New(ingest.Config{Enqueuer: c, Mapping: tc.m})
			if err != nil {
				t.Fatal(err)
			}
			first, err := in.Ingest(ctx, []*ingest.Message{msg(7)})
			if err != nil || first.Ingested != 1 {
				t.Fatalf("%s: first ingest: %+v, %v", tc.name, first, err)
			}
			// Again alone, then again within a batch with a new message.
			again, err := in.Ingest(ctx, []*ingest.Message{tc.again})
			if err != nil || again.Ingested != 0 || again.Duplicate != 1 {
				t.Fatalf("%s: redelivery: %+v, %v", tc.name, again, err)
			}
			other := msg(9)
			other.Value = []byte(`{"check":{"id":"c-2","subscription":"s","minute":2}}`)
			other.Header = func(string) string { return "h-2" }
			mixed, err := in.Ingest(ctx, []*ingest.Message{other, tc.again})
			if err != nil || mixed.Ingested != 1 || mixed.Duplicate != 1 {
				t.Fatalf("%s: mixed batch: %+v, %v", tc.name, mixed, err)
			}
			if n := countTasks(t, c, tc.m.Queue); n != 2 {
				t.Fatalf("%s: %d tasks, want 2", tc.name, n)
			}
			in.Close()
		}
		// The position-derived id is stable and names queue and position.
		p := ingest.Position{Broker: "kafka", Topic: "t", Partition: 2, Offset: 7}
		if p.TaskID("plain2") != p.TaskID("plain2") || p.TaskID("plain2") == p.TaskID("plain") {
			t.Fatal("position ids are not stable per queue")
		}
	})
}

// A message that cannot become a task (not JSON, no id field, a bad
// sequence, an id the engine refuses) is not dropped: it is recorded as a
// refused task, dead-lettered with its reason and broker position by the
// refused worker; the good messages of its batch are ingested. Refusing
// the same message again records nothing new.
func TestRefusedMessagesDeadLetter(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ctx := context.Background()
		c := client(t, db)
		in, err := ingest.New(ingest.Config{Enqueuer: c, Mapping: mapping(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		vals := []string{
			`{"check":{"id":"ok-1","subscription":"s","minute":1}}`,
			`not json`,
			`{"check":{"subscription":"s","minute":2}}`,
			`{"check":{"id":"bad-seq","subscription":"s","minute":"soon"}}`,
			`{"check":{"id":"has space","subscription":"s","minute":3}}`,
			`{"check":{"id":"no-key","minute":4}}`,
			`{"check":{"id":"ok-2","subscription":"s","minute":5}}`,
		}
		reasons := []string{"", "not_json", "id", "sequence", "id", "ordering_key", ""}
		var msgs []*ingest.Message
		for i, v := range vals {
			msgs = append(msgs, &ingest.Message{Value: []byte(v), Position: ingest.Position{Broker: "nats", Topic: "S", Offset: int64(i + 1)}})
		}
		got, err := in.Ingest(ctx, msgs)
		if err != nil || got.Ingested != 2 || got.Refused != 5 {
			t.Fatalf("ingest: %+v, %v", got, err)
		}
		if again, err := in.Ingest(ctx, msgs); err != nil || again.Duplicate != 2 || again.Refused != 5 {
			t.Fatalf("again: %+v, %v", again, err)
		}
		if n := countTasks(t, c, ingest.RefusedQueue); n != 5 {
			t.Fatalf("%d refused tasks, want 5 (once each)", n)
		}
		w, err := ingest.RefusedWorker(c, backstop.WorkerConfig{PollInterval: 10_000_000})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer w.Stop(ctx)
		testwait.For(t, "the refused messages dead-lettered", func() bool {
			ds, err := c.DeadLetters(ctx, backstop.ListParams{Queue: ingest.RefusedQueue})
			return err == nil && len(ds) == 5
		})
		ds, _ := c.DeadLetters(ctx, backstop.ListParams{Queue: ingest.RefusedQueue})
		seen := map[string]string{}
		for _, d := range ds {
			rp := decodeRefused(t, d)
			seen[rp.Source] = rp.Reason
			if d.DeadReason != backstop.ReasonPermanentError || !strings.Contains(d.LastError, rp.Source) || !strings.Contains(d.LastError, rp.Reason) {
				t.Fatalf("dead letter %s: %s %q", d.ID, d.DeadReason, d.LastError)
			}
			if d.Attributes["ingest_queue"] != orderedQueue || rp.Queue != orderedQueue || rp.Value == "" {
				t.Fatalf("refusal record %+v %v", rp, d.Attributes)
			}
		}
		for i, r := range reasons {
			if src := fmt.Sprintf("nats:S/%d", i+1); seen[src] != r {
				t.Fatalf("%s refused as %q, want %q", src, seen[src], r)
			}
		}
	})
}

// Headers are kept with a refusal; an id header that is missing refuses.
func TestRefusedKeepsHeaders(t *testing.T) {
	ctx := context.Background()
	c := client(t, testdb.SQLite(t))
	url := natsServer(t, "H", "h.in")
	publishNATS(t, url, "h.in", [][]byte{[]byte(`{"a":1}`)}, nats.Header{"Other": []string{"x"}})
	in, stop := run(t, c, ingest.Mapping{Queue: "h", Kind: "k", IDHeader: "Msg-Id"}, ingest.Source{URL: url, Subject: "h.in"})
	testwait.For(t, "the refusal recorded", func() bool { return countTasks(t, c, ingest.RefusedQueue) == 1 })
	stop()
	_ = in
	ts, err := c.List(ctx, backstop.ListParams{Queue: ingest.RefusedQueue})
	if err != nil {
		t.Fatal(err)
	}
	rp := decodeRefused(t, ts[0])
	if rp.Headers["Other"] != "x" || rp.Reason != "id" || !strings.HasPrefix(rp.Source, "nats:H/1") {
		t.Fatalf("refusal %+v", rp)
	}
}

// A subject no JetStream stream covers is an error, not a wait: nothing
// would ever be read.
func TestNATSSubjectWithoutStream(t *testing.T) {
	c := client(t, testdb.SQLite(t))
	url := natsServer(t, "OTHER", "other.>")
	in, err := ingest.New(ingest.Config{Enqueuer: c, Mapping: ingest.Mapping{Queue: "q", Kind: "k"}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = ingest.Run(ctx, ingest.Source{URL: url, Subject: "nowhere"}, in, nil)
	if err == nil || !strings.Contains(err.Error(), "no JetStream stream covers subject nowhere") {
		t.Fatalf("err = %v", err)
	}
}
