package relay_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/relay"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testnats"
	"github.com/backstophq/backstop/internal/testwait"
)

// Two relays (two clients on one database, as two processes would be)
// deliver one sink at once, with no election: a message is claimed under
// a lease by one of them, and a key's next message is admitted only after
// the one before it settled. The stream holds every message once, each
// key's in publish order, and both relays delivered.
func TestTwoRelaysShareSink(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ns := testnats.Start(t, -1, t.TempDir())
		c := client(t, db, nil)
		a := startRelay(t, c, map[string]relay.Sink{"bus": openSink(t, "bus", ns.ClientURL(), relay.Options{})})
		b := startRelay(t, client(t, db, nil), map[string]relay.Sink{"bus": openSink(t, "bus", ns.ClientURL(), relay.Options{})})
		const keys, per = 8, 40
		want := map[string][]string{}
		for i := range per {
			var msgs []backstop.Message
			for k := range keys {
				key := fmt.Sprintf("k%d", k)
				msgs = append(msgs, backstop.Message{Sink: "bus", Topic: "t." + key, Key: key, Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))})
			}
			rs, err := c.Publish(context.Background(), msgs...)
			if err != nil {
				t.Fatal(err)
			}
			for k, r := range rs {
				want[fmt.Sprintf("k%d", k)] = append(want[fmt.Sprintf("k%d", k)], r.Task.ID)
			}
		}
		var got []streamMsg
		testwait.For(t, "every message in the stream", func() bool {
			got = readStream(t, ns.ClientURL(), relay.NatsStreamName("bus"))
			return len(got) >= keys*per
		})
		checkOrder(t, want, got)
		by := map[string]int{}
		for _, ids := range want {
			for _, id := range ids {
				task, err := c.Get(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				by[task.WorkerID]++
			}
		}
		if by[a.ID()] == 0 || by[b.ID()] == 0 {
			t.Fatalf("deliveries by relay %v: want both %s and %s", by, a.ID(), b.ID())
		}
	})
}
