package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/relay"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testnats"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store/pgstore"
	"github.com/backstophq/backstop/store/sqlitestore"
)

// publishTx publishes msgs in a transaction of the store's own database
// (a *sql.Tx on SQLite, a pgx.Tx on Postgres) that commits or rolls back.
func publishTx(t *testing.T, c *backstop.Client, commit bool, msgs ...backstop.Message) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	collect := func(rs []backstop.EnqueueResult, err error) {
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			ids = append(ids, r.Task.ID)
		}
	}
	switch s := c.Store().(type) {
	case *sqlitestore.Store:
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		collect(c.PublishTx(ctx, tx, msgs...))
		end(t, commit, tx.Commit, tx.Rollback)
	case *pgstore.Store:
		tx, err := s.Pool().BeginTx(ctx, pgx.TxOptions{})
		if err != nil {
			t.Fatal(err)
		}
		collect(c.PublishTx(ctx, tx, msgs...))
		end(t, commit, func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) })
	default:
		t.Fatalf("store %T", s)
	}
	return ids
}

func end(t *testing.T, commit bool, c, r func() error) {
	t.Helper()
	f := r
	if commit {
		f = c
	}
	if err := f(); err != nil {
		t.Fatal(err)
	}
}

// A message published in a rolled-back transaction never reaches the
// broker; one published in a committed transaction reaches it exactly
// once, even when delivered again (JetStream's de-duplication by
// Nats-Msg-Id = the message id).
func TestPublishTxNATS(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ns := testnats.Start(t, -1, t.TempDir())
		c := client(t, db, nil)
		sink := openSink(t, "bus", ns.ClientURL(), relay.Options{})
		msg := func(p string) backstop.Message {
			return backstop.Message{Sink: "bus", Topic: "orders.created", Key: "order-1", Payload: []byte(p),
				Headers: map[string]string{"Content-Kind": "order"}, Attributes: map[string]string{"tenant": "acme"}}
		}
		lost := publishTx(t, c, false, msg(`{"n":0}`))
		kept := publishTx(t, c, true, msg(`{"n":1}`))
		startRelay(t, c, map[string]relay.Sink{"bus": sink})
		task := waitState(t, c, kept[0], backstop.StateSucceeded)
		if _, err := c.Get(context.Background(), lost[0]); err == nil {
			t.Fatalf("the rolled-back message %s exists", lost[0])
		}
		// Delivered again (a relay that died before settling): the stream
		// drops the duplicate.
		d, err := relay.DeliveryOf(task)
		if err != nil {
			t.Fatal(err)
		}
		if err := sink.Deliver(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		got := readStream(t, ns.ClientURL(), relay.NatsStreamName("bus"))
		if len(got) != 1 {
			t.Fatalf("stream holds %d messages, want 1: %+v", len(got), got)
		}
		m := got[0]
		if m.id != kept[0] || m.subject != "orders.created" || string(m.data) != `{"n":1}` || m.key != "order-1" {
			t.Fatalf("stream message %+v, want id %s", m, kept[0])
		}
		if m.headers.Get("Content-Kind") != "order" || m.headers.Get("Backstop-Attr-tenant") != "acme" || m.headers.Get("Backstop-Message-Id") != kept[0] {
			t.Fatalf("headers %v", m.headers)
		}
	})
}

// Messages of one key reach the stream in publish order, several keys
// interleaved, with the relay delivering many at once.
func TestPerKeyOrderNATS(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ns := testnats.Start(t, -1, t.TempDir())
		c := client(t, db, nil)
		const keys, per = 6, 30
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
		startRelay(t, c, map[string]relay.Sink{"bus": openSink(t, "bus", ns.ClientURL(), relay.Options{})})
		var got []streamMsg
		testwait.For(t, "every message in the stream", func() bool {
			got = readStream(t, ns.ClientURL(), relay.NatsStreamName("bus"))
			return len(got) >= keys*per
		})
		checkOrder(t, want, got)
	})
}

// checkOrder: each key's ids arrived exactly once, in want's order.
func checkOrder(t *testing.T, want map[string][]string, got []streamMsg) {
	t.Helper()
	byKey := map[string][]string{}
	seen := map[string]bool{}
	for _, m := range got {
		if seen[m.id] {
			t.Fatalf("message %s arrived twice", m.id)
		}
		seen[m.id] = true
		byKey[m.key] = append(byKey[m.key], m.id)
	}
	for k, ids := range want {
		if strings.Join(byKey[k], ",") != strings.Join(ids, ",") {
			t.Fatalf("key %s arrived as\n%v\nwant\n%v", k, byKey[k], ids)
		}
	}
}

// A message the stream refuses for good (larger than its max_msg_size)
// dead-letters at its first attempt with the broker's error; once the
// stream accepts it, a replay delivers it under the same id.
func TestRefusedMessageDeadLettersAndReplays(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ctx := context.Background()
		ns := testnats.Start(t, -1, t.TempDir())
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		cfg := jetstream.StreamConfig{Name: "SMALL", Subjects: []string{"big"}, MaxMsgSize: 256}
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		c := client(t, db, nil)
		rs, err := c.Publish(ctx, backstop.Message{Sink: "bus", Topic: "big", Key: "k", Payload: []byte(`"` + strings.Repeat("x", 1000) + `"`)})
		if err != nil {
			t.Fatal(err)
		}
		id := rs[0].Task.ID
		startRelay(t, c, map[string]relay.Sink{"bus": openSink(t, "bus", ns.ClientURL(), relay.Options{})})
		dead := waitState(t, c, id, backstop.StateDead)
		if dead.DeadReason != backstop.ReasonPermanentError || !strings.Contains(dead.LastError, "maximum") || len(dead.Executions) != 1 {
			t.Fatalf("dead letter: reason %s, error %q, %d attempts", dead.DeadReason, dead.LastError, len(dead.Executions))
		}
		cfg.MaxMsgSize = 4096
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Replay(ctx, backstop.ReplayParams{ID: id}); err != nil {
			t.Fatal(err)
		}
		waitState(t, c, id, backstop.StateSucceeded)
		got := readStream(t, ns.ClientURL(), "SMALL")
		if len(got) != 1 || got[0].id != id {
			t.Fatalf("stream holds %+v, want message %s once", got, id)
		}
	})
}

// The broker stops with messages in flight: they wait, retried by the
// sink's policy (none dead-lettered), and flow in order once it is back.
func TestBrokerDownThenUp(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ctx := context.Background()
		dir := t.TempDir()
		ns := testnats.Start(t, -1, dir)
		port, url := portOf(t, ns), ns.ClientURL()
		c := client(t, db, &backstop.Config{MaxAttempts: 1000})
		startRelay(t, c, map[string]relay.Sink{"bus": openSink(t, "bus", url, relay.Options{Timeout: time.Second})})
		want := map[string][]string{}
		publish := func(i int) {
			for _, key := range []string{"a", "b", "c"} {
				rs, err := c.Publish(ctx, backstop.Message{Sink: "bus", Topic: "down." + key, Key: key, Payload: []byte(fmt.Sprint(i))})
				if err != nil {
					t.Fatal(err)
				}
				want[key] = append(want[key], rs[0].Task.ID)
			}
		}
		for i := range 5 {
			publish(i)
		}
		testwait.For(t, "the first messages in the stream", func() bool {
			return len(readStream(t, url, relay.NatsStreamName("bus"))) == 15
		})
		ns.Shutdown()
		ns.WaitForShutdown()
		for i := 5; i < 20; i++ {
			publish(i)
		}
		testwait.For(t, "failed attempts while the broker is down", func() bool {
			task, err := c.Get(ctx, want["a"][5])
			if err != nil {
				t.Fatal(err)
			}
			return len(task.Executions) >= 2
		})
		testnats.Start(t, port, dir)
		var got []streamMsg
		testwait.For(t, "every message in the stream", func() bool {
			got = readStream(t, url, relay.NatsStreamName("bus"))
			return len(got) >= 60
		})
		checkOrder(t, want, got)
		for _, ids := range want {
			for _, id := range ids {
				if task := waitState(t, c, id, backstop.StateSucceeded); task.DeadReason != "" {
					t.Fatalf("%s dead-lettered", id)
				}
			}
		}
	})
}
