package ingest_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/ingest"
	"github.com/backstophq/backstop/internal/relay"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
)

// The lag in time follows the broker's timestamps: while the database is
// down, the oldest message read and not committed ages (records produced
// an hour ago: about 3600s), and backstop relay status shows it with the
// enqueue's error; once an ingester caught up, it is 0 and so is its
// report.
func TestIngestLagSeconds(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) { ingestLagSeconds(t, db) })
}

func ingestLagSeconds(t *testing.T, db string) {
	ctx := context.Background()
	c := client(t, db)
	addr := kafkaCluster(t, "uptime", 2)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("uptime"))
	if err != nil {
		t.Fatal(err)
	}
	hourAgo := time.Now().Add(-time.Hour)
	all, _, _ := results(4, 5, 1)
	for _, r := range all {
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(r.key), Value: r.value(), Timestamp: hourAgo}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()
	src := ingest.Source{URL: "kafka://" + addr, Topic: "uptime", Group: "g", Batch: 5}

	// The database the tasks go to is down (that client's store closed):
	// nothing commits. The ingester reports to another connection, read
	// by backstop relay status.
	in, stop := runReporting(t, closedClient(t, db), c, src, "a")
	testwait.For(t, "an hour of lag", func() bool { return in.LagSeconds(time.Now()) > 3500 })
	if got := in.LagSeconds(time.Now()); got > 3700 {
		t.Fatalf("lag %fs, want about 3600", got)
	}
	var st *relay.Status
	testwait.For(t, "the stuck ingester's report", func() bool {
		var err error
		if st, err = relay.ReadStatus(ctx, c); err != nil {
			t.Fatal(err)
		}
		return len(st.Ingesters) == 1 && st.Ingesters[0].LastError != ""
	})
	if is := st.Ingesters[0]; is.Group != "g" || is.Topic != "uptime" || is.Queue != orderedQueue || is.Holder != "a" ||
		is.LagSeconds < 3500 || is.LagSeconds > 3700 {
		t.Fatalf("the stuck ingester's status: %+v", is)
	}
	stop()

	in, stop = runReporting(t, c, c, src, "b")
	defer stop()
	testwait.For(t, "every record enqueued", func() bool { return countTasks(t, c, orderedQueue) == len(all) })
	testwait.For(t, "caught up", func() bool { return in.Lag() == 0 && in.LagSeconds(time.Now()) == 0 })
	testwait.For(t, "the caught-up report", func() bool {
		st, err := relay.ReadStatus(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		is := st.Ingesters[0]
		return len(st.Ingesters) == 1 && is.Holder == "b" && is.LagSeconds == 0 && is.LagMessages == 0 && is.LastError == "" && is.LagFrom == nil
	})
}

// runReporting runs an ingester into enq that reports its position to
// rep's store as id, until the returned stop is called.
func runReporting(t testing.TB, enq ingest.Enqueuer, rep *backstop.Client, src ingest.Source, id string) (*ingest.Ingester, func()) {
	t.Helper()
	in, err := ingest.New(ingest.Config{Enqueuer: enq, Mapping: mapping(t), Logger: slog.New(slog.DiscardHandler), Positions: rep.Store(), ID: id})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ingest.Run(ctx, src, in, nil) }()
	return in, func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		in.Close()
	}
}

// closedClient is a client whose store is closed: every enqueue fails, as
// with the database down.
func closedClient(t testing.TB, db string) ingest.Enqueuer {
	t.Helper()
	c := client(t, db)
	c.Store().Close()
	return c
}

// Reading, Committed and LagSeconds: the oldest message being enqueued
// counts first; after a commit, the newest committed counts while
// messages wait; caught up is 0.
func TestLagSecondsRules(t *testing.T) {
	in, err := ingest.New(ingest.Config{Enqueuer: client(t, testdb.SQLite(t)), Mapping: ingest.Mapping{Queue: "q", Kind: "k"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	if in.LagSeconds(now) != 0 {
		t.Fatal("lag before any read")
	}
	in.SetLag(0, 10)
	in.Reading(0, now.Add(-30*time.Second))
	in.Reading(1, now.Add(-5*time.Second))
	if got := in.LagSeconds(now); got != 30 {
		t.Fatalf("reading: %v, want 30", got)
	}
	in.Committed(0, now.Add(-20*time.Second))
	in.Committed(1, now.Add(-time.Second))
	if got := in.LagSeconds(now); got != 20 {
		t.Fatalf("committed, 10 waiting in partition 0: %v, want 20", got)
	}
	in.SetLag(0, 0)
	if got := in.LagSeconds(now); got != 0 {
		t.Fatalf("caught up: %v, want 0", got)
	}
}
