package ingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/ingest"
	"github.com/backstophq/backstop/internal/testnats"
	"github.com/backstophq/backstop/internal/testwait"
)

// orderedQueue is the queue results go to: ordered with step 1, a short
// drain, so a withheld sequence is reported as a gap in test time.
const orderedQueue = "results"

// client opens db (migrated) with results ordered.
func client(t testing.TB, db string) *backstop.Client {
	t.Helper()
	ctx := context.Background()
	s, err := dburl.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := backstop.NewClient(s, &backstop.Config{Logger: slog.New(slog.DiscardHandler),
		Queues: map[string]backstop.QueueConfig{orderedQueue: {Ordering: backstop.OrderingConfig{
			Enabled: true, Step: 1, Backoff: []time.Duration{50 * time.Millisecond}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// result is one uptime result: key k's sequence seq.
type result struct {
	key string
	seq int64
}

func (r result) value() []byte {
	return fmt.Appendf(nil, `{"check":{"id":"%s-%d","subscription":"%s","minute":%d},"ok":true}`, r.key, r.seq, r.key, r.seq)
}

// results makes per results for each of keys keys, shuffled, without the
// withheld ones: for every fifth key one sequence in the middle, for every
// twentieth also two in a row later. want is each key's delivered
// sequences in order, gaps the gaps each key's handler must see.
func results(keys, per int, seed uint64) (all []result, want map[string][]int64, gaps map[string][]backstop.Gap) {
	want, gaps = map[string][]int64{}, map[string][]backstop.Gap{}
	for k := range keys {
		key := fmt.Sprintf("sub-%03d", k)
		withheld := map[int64]bool{}
		if k%5 == 0 && per >= 40 {
			s := int64(10 + k%(per/3))
			withheld[s] = true
			gaps[key] = append(gaps[key], backstop.Gap{From: s, To: s})
		}
		if k%20 == 0 && per >= 40 {
			s := int64(per - per/4)
			withheld[s], withheld[s+1] = true, true
			gaps[key] = append(gaps[key], backstop.Gap{From: s, To: s + 1})
		}
		for seq := int64(1); seq <= int64(per); seq++ {
			if !withheld[seq] {
				all = append(all, result{key, seq})
				want[key] = append(want[key], seq)
			}
		}
	}
	r := rand.New(rand.NewPCG(seed, seed))
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all, want, gaps
}

func mapping(t testing.TB) ingest.Mapping {
	t.Helper()
	return ingest.Mapping{Queue: orderedQueue, Kind: "check", IDField: path(t, "check.id"),
		OrderingKeyField: path(t, "$.check.subscription"), SequenceField: path(t, "check.minute")}
}

func path(t testing.TB, s string) *ingest.Path {
	t.Helper()
	p, err := ingest.ParsePath(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// run runs an ingester from src until the returned stop is called.
func run(t testing.TB, c ingest.Enqueuer, m ingest.Mapping, src ingest.Source) (*ingest.Ingester, func()) {
	t.Helper()
	in, err := ingest.New(ingest.Config{Enqueuer: c, Mapping: m, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ingest.Run(ctx, src, in, nil) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
			in.Close()
		})
	}
	t.Cleanup(stop)
	return in, stop
}

// handled is what a worker saw: per key, the sequences in handling order
// and the gaps reported with them.
type handled struct {
	mu   sync.Mutex
	seqs map[string][]int64
	gaps map[string][]backstop.Gap
	n    int
}

// work runs a worker on the ordered queue until the test ends.
func work(t testing.TB, c *backstop.Client) *handled {
	t.Helper()
	h := &handled{seqs: map[string][]int64{}, gaps: map[string][]backstop.Gap{}}
	w, err := backstop.NewWorker(c, &backstop.WorkerConfig{Queues: map[string]int{orderedQueue: 16},
		PollInterval: 10 * time.Millisecond, MaintenanceInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("check", backstop.HandlerFunc(func(ctx context.Context, task *backstop.Task) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.seqs[task.OrderingKey] = append(h.seqs[task.OrderingKey], task.Sequence)
		h.gaps[task.OrderingKey] = append(h.gaps[task.OrderingKey], backstop.Gaps(ctx)...)
		h.n++
		return nil
	}))
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return h
}

// check waits until n tasks were handled and compares each key's order
// and gaps.
func (h *handled) check(t testing.TB, n int, want map[string][]int64, gaps map[string][]backstop.Gap) {
	t.Helper()
	testwait.Within(t, 10*time.Minute, fmt.Sprintf("%d tasks handled", n), func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.n >= n
	})
	time.Sleep(100 * time.Millisecond) // nothing more may come
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n != n {
		t.Fatalf("%d tasks handled, want %d", h.n, n)
	}
	for key, seqs := range want {
		if !slices.Equal(h.seqs[key], seqs) {
			t.Fatalf("key %s handled %v, want %v", key, h.seqs[key], seqs)
		}
		if !slices.Equal(h.gaps[key], gaps[key]) {
			t.Fatalf("key %s reported gaps %v, want %v", key, h.gaps[key], gaps[key])
		}
	}
}

// countTasks counts the tasks of queue.
func countTasks(t testing.TB, c *backstop.Client, queue string) int {
	t.Helper()
	n, after := 0, ""
	for {
		ts, err := c.List(context.Background(), backstop.ListParams{Queue: queue, Limit: 10000, AfterID: after, WithoutPayload: true})
		if err != nil {
			t.Fatal(err)
		}
		n += len(ts)
		if len(ts) < 10000 {
			return n
		}
		after = ts[len(ts)-1].ID
	}
}

// kafkaCluster is franz-go's kfake, an in-process Kafka speaking the real
// protocol on loopback, with topic's partitions.
func kafkaCluster(t testing.TB, topic string, partitions int) string {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(partitions), topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	return kc.ListenAddrs()[0]
}

// produceKafka writes values to topic, keyed by key (so a key's records
// share a partition, as a producer of seed 001's results would).
func produceKafka(t testing.TB, addr, topic string, rs []result) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, len(rs))
	for i, r := range rs {
		recs[i] = &kgo.Record{Key: []byte(r.key), Value: r.value()}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// natsServer is a real nats-server with JetStream, in-process on a
// loopback port, with a stream covering subject.
func natsServer(t testing.TB, stream, subject string) string {
	t.Helper()
	s := testnats.Start(t, -1, t.TempDir())
	nc, js := natsJS(t, s.ClientURL())
	defer nc.Close()
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: stream, Subjects: []string{subject}}); err != nil {
		t.Fatal(err)
	}
	return s.ClientURL()
}

func natsJS(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// publishNATS publishes values to subject with acks.
func publishNATS(t testing.TB, url, subject string, values [][]byte, header nats.Header) {
	t.Helper()
	nc, js := natsJS(t, url)
	defer nc.Close()
	ctx := context.Background()
	futs := make([]jetstream.PubAckFuture, 0, len(values))
	for i, v := range values {
		f, err := js.PublishMsgAsync(&nats.Msg{Subject: subject, Data: v, Header: header})
		if err != nil {
			t.Fatal(err)
		}
		futs = append(futs, f)
		if i%1000 == 999 || i == len(values)-1 {
			// At most 1,000 unacknowledged (the client stalls at 4,000).
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				t.Fatal("publishing timed out")
			case <-ctx.Done():
			}
		}
	}
	for _, f := range futs {
		select {
		case err := <-f.Err():
			t.Fatal(err)
		default:
		}
	}
}

func values(rs []result) [][]byte {
	out := make([][]byte, len(rs))
	for i, r := range rs {
		out[i] = r.value()
	}
	return out
}

func decodeRefused(t testing.TB, task *backstop.Task) ingest.RefusedPayload {
	t.Helper()
	var rp ingest.RefusedPayload
	if err := json.Unmarshal(task.Payload, &rp); err != nil {
		t.Fatal(err)
	}
	return rp
}
