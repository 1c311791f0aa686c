package relay_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/relay"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testnats"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store/pgstore"
)

// Two transactions racing on one key: the message made first commits
// last, after the relay delivered the other. It is delivered too — after
// it, in commit order — never canceled as stale: a committed outbox
// message is never dropped. (Postgres: SQLite's single writer makes the
// second transaction wait for the first.)
func TestLateMessageRunsInCommitOrder(t *testing.T) {
	db := testdb.Postgres(t)
	ctx := context.Background()
	ns := testnats.Start(t, -1, t.TempDir())
	c := client(t, db, nil)
	pool := c.Store().(*pgstore.Store).Pool()
	msg := func(p string) backstop.Message {
		return backstop.Message{Sink: "bus", Topic: "orders.late", Key: "order-1", Payload: []byte(p)}
	}
	early, err := pool.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer early.Rollback(ctx)
	first, err := c.PublishTx(ctx, early, msg(`"made first"`))
	if err != nil {
		t.Fatal(err)
	}
	second := publishTx(t, c, true, msg(`"made second"`))
	startRelay(t, c, map[string]relay.Sink{"bus": openSink(t, "bus", ns.ClientURL(), relay.Options{})})
	waitState(t, c, second[0], backstop.StateSucceeded)
	if err := early.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	task := waitState(t, c, first[0].Task.ID, backstop.StateSucceeded)
	if task.LastError != "" {
		t.Fatalf("the late message: %+v", task)
	}
	var got []string
	testwait.For(t, "both messages in the stream", func() bool {
		got = got[:0]
		for _, m := range readStream(t, ns.ClientURL(), relay.NatsStreamName("bus")) {
			got = append(got, m.id)
		}
		return len(got) == 2
	})
	if got[0] != second[0] || got[1] != first[0].Task.ID {
		t.Fatalf("stream order %v, want commit order [%s %s]", got, second[0], first[0].Task.ID)
	}
}
