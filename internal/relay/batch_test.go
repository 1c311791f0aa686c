package relay_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/relay"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testnats"
)

// batchSizes records the size of each batch a real sink delivers.
type batchSizes struct {
	relay.BatchSink
	mu    sync.Mutex
	sizes []int
}

func (b *batchSizes) DeliverBatch(ctx context.Context, ds []*relay.Delivery) []error {
	b.mu.Lock()
	b.sizes = append(b.sizes, len(ds))
	b.mu.Unlock()
	return b.BatchSink.DeliverBatch(ctx, ds)
}

// The relay publishes the messages it claims together as one batch with
// asynchronous acknowledgements (JetStream's PublishMsgAsync), keeps each
// key's commit order, and fails a refused message alone: the one the
// stream refuses (larger than its max_msg_size) dead-letters at its first
// attempt while the messages published with it succeed at theirs.
func TestRelayDeliversClaimedBatch(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ctx := context.Background()
		ns := testnats.Start(t, -1, t.TempDir())
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BATCH", Subjects: []string{"batch"}, MaxMsgSize: 512}); err != nil {
			t.Fatal(err)
		}
		c := client(t, db, nil)
		var msgs []backstop.Message
		for i := range 60 {
			key := ""
			if i%2 == 0 {
				key = fmt.Sprintf("k%d", i%6)
			}
			payload := fmt.Sprintf(`{"n":%d}`, i)
			if i == 31 {
				payload = `"` + strings.Repeat("x", 1000) + `"`
			}
			msgs = append(msgs, backstop.Message{Sink: "bus", Topic: "batch", Key: key, Payload: []byte(payload)})
		}
		rs, err := c.Publish(ctx, msgs...)
		if err != nil {
			t.Fatal(err)
		}
		sink := &batchSizes{BatchSink: openSink(t, "bus", ns.ClientURL(), relay.Options{}).(relay.BatchSink)}
		startRelay(t, c, map[string]relay.Sink{"bus": sink})
		refused := rs[31].Task.ID
		dead := waitState(t, c, refused, backstop.StateDead)
		if dead.DeadReason != backstop.ReasonPermanentError || !strings.Contains(dead.LastError, "maximum") || len(dead.Executions) != 1 {
			t.Fatalf("refused message: reason %s, error %q, %d attempts", dead.DeadReason, dead.LastError, len(dead.Executions))
		}
		wantByKey := map[string][]string{}
		for i, r := range rs {
			if i == 31 {
				continue
			}
			task := waitState(t, c, r.Task.ID, backstop.StateSucceeded)
			if len(task.Executions) != 1 {
				t.Errorf("message %d: %d attempts, want 1 (a batch-mate's refusal is not its failure)", i, len(task.Executions))
			}
			if k := msgs[i].Key; k != "" {
				wantByKey[k] = append(wantByKey[k], r.Task.ID)
			}
		}
		gotByKey := map[string][]string{}
		got := readStream(t, ns.ClientURL(), "BATCH")
		for _, m := range got {
			if m.key != "" {
				gotByKey[m.key] = append(gotByKey[m.key], m.id)
			}
		}
		if len(got) != 59 {
			t.Fatalf("stream holds %d messages, want 59", len(got))
		}
		for k, want := range wantByKey {
			if !slices.Equal(gotByKey[k], want) {
				t.Errorf("key %s: stream order %v, want commit order %v", k, gotByKey[k], want)
			}
		}
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if slices.Max(sink.sizes) < 2 {
			t.Fatalf("batch sizes %v: no claimed batch was delivered together", sink.sizes)
		}
		t.Logf("batch sizes %v", sink.sizes)
	})
}
