package ingest_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/ingest"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
)

// Two elected ingesters of one topic and group: only the leader reads and
// enqueues while both run; when it stops, the other takes the lease and
// ingests the rest. Every message becomes one task; the stand-by ingested
// nothing while the leader was up.
func TestIngestElection(t *testing.T) {
	for _, broker := range []string{"kafka", "nats"} {
		t.Run(broker, func(t *testing.T) {
			testdb.EachStore(t, func(t *testing.T, db string) {
				c := client(t, db)
				all, _, _ := results(20, 50, 9)
				first, rest := all[:len(all)/2], all[len(all)/2:]
				var src ingest.Source
				publish := func(rs []result) {}
				switch broker {
				case "kafka":
					addr := kafkaCluster(t, "uptime", 4)
					src = ingest.Source{URL: "kafka://" + addr, Topic: "uptime", Batch: 50}
					publish = func(rs []result) { produceKafka(t, addr, "uptime", rs) }
				case "nats":
					url := natsServer(t, "RESULTS", "uptime.results")
					src = ingest.Source{URL: url, Subject: "uptime.results", Batch: 50}
					publish = func(rs []result) { publishNATS(t, url, "uptime.results", values(rs), nil) }
				}
				type candidate struct {
					in     *ingest.Ingester
					cancel context.CancelFunc
					done   chan error
				}
				start := func(id string) *candidate {
					in, err := ingest.New(ingest.Config{Enqueuer: c, Mapping: mapping(t), Logger: slog.New(slog.DiscardHandler)})
					if err != nil {
						t.Fatal(err)
					}
					ctx, cancel := context.WithCancel(context.Background())
					cd := &candidate{in: in, cancel: cancel, done: make(chan error, 1)}
					go func() {
						cd.done <- ingest.RunElected(ctx, src, in, ingest.Election{Store: c.Store(), ID: id, TTL: time.Second}, nil)
					}()
					t.Cleanup(func() { cancel(); <-cd.done; in.Close() })
					return cd
				}
				publish(first)
				a := start("a")
				testwait.For(t, "a to ingest the first half", func() bool { return a.in.Totals().Ingested == len(first) })
				b := start("b")
				time.Sleep(300 * time.Millisecond) // b's rounds: it must not take the lease
				publish(rest[:10])
				testwait.For(t, "a to ingest more", func() bool { return a.in.Totals().Ingested == len(first)+10 })
				if n := b.in.Totals(); n.Ingested+n.Duplicate > 0 {
					t.Fatalf("the stand-by ingested %+v while the leader was up", n)
				}
				a.cancel()
				if err := <-a.done; err != nil {
					t.Fatalf("leader: %v", err)
				}
				a.done <- nil // for the cleanup
				publish(rest[10:])
				testwait.For(t, "b to take over and ingest the rest", func() bool { return countTasks(t, c, orderedQueue) >= len(all) })
				time.Sleep(200 * time.Millisecond)
				if n := countTasks(t, c, orderedQueue); n != len(all) {
					t.Fatalf("%d tasks, want %d", n, len(all))
				}
				if got := a.in.Totals().Ingested + b.in.Totals().Ingested; got != len(all) {
					t.Fatalf("a %+v and b %+v ingested %d, want %d", a.in.Totals(), b.in.Totals(), got, len(all))
				}
			})
		})
	}
}
