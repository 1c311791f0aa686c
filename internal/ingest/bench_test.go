package ingest_test

import (
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/ingest"
	"github.com/backstophq/backstop/internal/testdb"
)

// BenchmarkIngest measures ingest throughput into an ordered queue: b.N
// results of 100 keys, shuffled, already in the broker (kfake, or an
// in-process nats-server with JetStream), enqueued by one ingester in
// batches of 500 (the default) until every one is a task. Reports
// messages/s. kafka-plain is the same into a plain (unordered) queue.
// SQLite always; Postgres when BACKSTOP_TEST_POSTGRES_URL is set.
//
//	go test -run '^$' -bench Ingest -benchtime 5000x ./internal/ingest/
func BenchmarkIngest(b *testing.B) {
	stores := map[string]func(testing.TB) string{"sqlite": testdb.SQLite, "postgres": testdb.Postgres}
	for _, broker := range []string{"kafka", "nats", "kafka-plain"} {
		for _, st := range []string{"sqlite", "postgres"} {
			b.Run(broker+"/"+st, func(b *testing.B) {
				c := client(b, stores[st](b))
				all, _, _ := results(100, max(b.N/100, 1), 3)
				src := ingest.Source{Group: "bench"}
				m := mapping(b)
				if broker == "kafka-plain" {
					// The floor: the same messages into a plain queue.
					m = ingest.Mapping{Queue: "plain", Kind: "check", IDField: m.IDField}
				}
				if broker != "nats" {
					addr := kafkaCluster(b, "results", 4)
					produceKafka(b, addr, "results", all)
					src.URL, src.Topic = "kafka://"+addr, "results"
				} else {
					src.URL = natsServer(b, "RESULTS", "uptime.results")
					src.Subject = "uptime.results"
					publishNATS(b, src.URL, "uptime.results", values(all), nil)
				}
				b.ResetTimer()
				start := time.Now()
				in, stop := run(b, c, m, src)
				for in.Totals().Ingested < len(all) {
					time.Sleep(5 * time.Millisecond)
				}
				el := time.Since(start)
				b.StopTimer()
				stop()
				b.ReportMetric(float64(len(all))/el.Seconds(), "msgs/s")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
