package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/relay"
	"github.com/backstophq/backstop/internal/testdb"
)

// Kafka through franz-go's kfake, an in-process Kafka speaking the real
// protocol on loopback (no Kafka server package is available here): each
// key's messages land once each, in publish order, as records whose key is
// the message key, headers and payload carried; a rolled-back
// transaction's message never lands.
func TestKafka(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ctx := context.Background()
		kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "events"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(kc.Close)
		addr := kc.ListenAddrs()[0]
		c := client(t, db, nil)
		lost := publishTx(t, c, false, backstop.Message{Sink: "log", Topic: "events", Key: "k0", Payload: []byte(`"lost"`)})
		want := map[string][]string{}
		for i := range 10 {
			for _, key := range []string{"k0", "k1", "k2", "k3"} {
				ids := publishTx(t, c, true, backstop.Message{Sink: "log", Topic: "events", Key: key, Payload: []byte(fmt.Sprint(i)),
					Headers: map[string]string{"X-I": fmt.Sprint(i)}})
				want[key] = append(want[key], ids[0])
			}
		}
		startRelay(t, c, map[string]relay.Sink{"log": openSink(t, "log", "kafka://"+addr, relay.Options{})})

		cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("events"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		var got []streamMsg
		deadline := time.Now().Add(time.Minute)
		for len(got) < 40 && time.Now().Before(deadline) {
			fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			fs := cons.PollFetches(fctx)
			cancel()
			fs.EachRecord(func(r *kgo.Record) {
				m := streamMsg{key: string(r.Key), subject: r.Topic, data: r.Value}
				for _, h := range r.Headers {
					if h.Key == "Backstop-Message-Id" {
						m.id = string(h.Value)
					}
				}
				got = append(got, m)
			})
		}
		for _, m := range got {
			if m.id == lost[0] {
				t.Fatal("the rolled-back message landed")
			}
		}
		if len(got) != 40 {
			t.Fatalf("%d records, want 40", len(got))
		}
		checkOrder(t, want, got)
	})
}
