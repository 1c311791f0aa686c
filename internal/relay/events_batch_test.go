package relay_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/relay"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testnats"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// --from end: a checkpoint's first run on a log with history starts at
// the log's end (none of the history is published, every later event
// is); an existing checkpoint is never moved by --from, either way.
func TestEventRelayFromEnd(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ctx := context.Background()
		ns := testnats.Start(t, -1, t.TempDir())
		c := client(t, db, nil)
		sink := openSink(t, "bus", ns.ClientURL(), relay.Options{})
		enqueueN(t, c, "q", 12) // the history
		// The log's end is after the events every transaction has ended
		// before (on PostgreSQL, one still open elsewhere holds it back).
		testwait.For(t, "the history to be readable", func() bool { return len(streamEvents(t, c, "queue.q")) == 12 })
		read := func() []streamMsg { return readStream(t, ns.ClientURL(), relay.NatsStreamName("bus")) }

		cfg := relay.EventsConfig{Sink: sink, SinkName: "bus", Checkpoint: "tail", Streams: []string{"queue.q"}, Batch: 5, From: relay.FromEnd}
		r := startEvents(t, c, cfg)
		cp, err := c.Store().RelayCheckpoint(ctx, "tail", "queue.q")
		if err != nil || cp.Cursor == "" {
			t.Fatalf("the new checkpoint %+v %v, want it at the log's end", cp, err)
		}
		enqueueN(t, c, "q", 7)
		testwait.For(t, "the 7 new events in the stream", func() bool { return len(read()) >= 7 })
		stopEvents(t, r)
		all := streamEvents(t, c, "queue.q")
		checkIDs(t, read(), ids(all[12:]))

		// Restarted with --from start, or --from end again: the checkpoint
		// resumes from its cursor, neither rewound nor moved to the end.
		enqueueN(t, c, "q", 3)
		cfg.From = relay.FromStart
		r = startEvents(t, c, cfg)
		testwait.For(t, "the 3 events written while stopped", func() bool { return len(read()) >= 10 })
		stopEvents(t, r)
		enqueueN(t, c, "q", 2)
		cfg.From = relay.FromEnd
		r = startEvents(t, c, cfg)
		testwait.For(t, "the 2 events written while stopped", func() bool { return len(read()) >= 12 })
		stopEvents(t, r)
		all = streamEvents(t, c, "queue.q")
		checkIDs(t, read(), ids(all[12:]))

		// Default (start): a new checkpoint publishes the history too.
		cfg.Checkpoint, cfg.From = "full", ""
		r = startEvents(t, c, cfg)
		testwait.For(t, "the whole history", func() bool {
			cp, err := c.Store().RelayCheckpoint(ctx, "full", "queue.q")
			return err == nil && cp.Published == int64(len(all))
		})
		stopEvents(t, r)
		checkIDs(t, read(), append(ids(all[12:]), ids(all[:12])...)) // the history after; the rest repeats, removed
		if cp, _ := c.Store().RelayCheckpoint(ctx, "full", "queue.q"); cp.Duplicates != int64(len(all)-12) {
			t.Fatalf("checkpoint %+v, want %d duplicates", cp, len(all)-12)
		}

		if _, err := relay.NewEvents(c, relay.EventsConfig{Sink: sink, SinkName: "bus", Checkpoint: "x", Streams: []string{"all"}, From: "now"}); err == nil ||
			!strings.Contains(err.Error(), `"now"`) {
			t.Fatalf("From now: %v, want refused", err)
		}
	})
}

// A batch the broker refuses in its middle: JetStream stores the events
// before the refused one (and those after it, published at once), but the
// checkpoint stops before the refused event, and says why. Once the cause
// is fixed, the relay goes on from there: the refused event and those
// after it are published again, the ones the broker already held counted
// as duplicates and dropped; nothing is skipped.
func TestEventRelayBatchFailsMidway(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ctx := context.Background()
		ns := testnats.Start(t, -1, t.TempDir())
		c := client(t, db, nil)
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		stream := relay.NatsStreamName("bus")
		cfgStream := jetstream.StreamConfig{Name: stream, Subjects: []string{"backstop.events.>"}, MaxMsgSize: 4096}
		if _, err := js.CreateStream(ctx, cfgStream); err != nil {
			t.Fatal(err)
		}
		enqueueN(t, c, "q", 4)
		big := store.NewEvent(time.Now(), "custom.big", "s", "q", "k", "", json.RawMessage(`{"blob":"`+strings.Repeat("x", 8000)+`"}`))
		if err := c.Store().AppendEvents(ctx, []backstop.Event{big}); err != nil {
			t.Fatal(err)
		}
		enqueueN(t, c, "q", 5)
		testwait.For(t, "the 10 events to be readable", func() bool { return len(streamEvents(t, c, "queue.q")) == 10 })
		all := streamEvents(t, c, "queue.q")
		if all[4].ID != big.ID {
			t.Fatalf("event 4 is %s, want the big one", all[4].Type)
		}

		sink := openSink(t, "bus", ns.ClientURL(), relay.Options{})
		cfg := relay.EventsConfig{Sink: sink, SinkName: "bus", Checkpoint: "feed", Streams: []string{"queue.q"}, Batch: 100}
		r := startEvents(t, c, cfg)
		var cp store.RelayCheckpoint
		testwait.For(t, "the refusal on the checkpoint", func() bool {
			cp, err = c.Store().RelayCheckpoint(ctx, "feed", "queue.q")
			return err == nil && cp.LastError != ""
		})
		testwait.For(t, "the events after the refused one in the stream", func() bool { return len(readStream(t, ns.ClientURL(), stream)) == 9 })
		cp, _ = c.Store().RelayCheckpoint(ctx, "feed", "queue.q")
		if cp.Cursor != all[3].Cursor || cp.Published != 4 || !strings.Contains(cp.LastError, "size") {
			t.Fatalf("checkpoint %+v, want at event 3 (%s), 4 published, the broker's error", cp, all[3].Cursor)
		}
		stopEvents(t, r)

		// The cause fixed: the refused event and the rest, nothing skipped,
		// the five the broker held already removed as repeats.
		cfgStream.MaxMsgSize = 0
		if _, err := js.UpdateStream(ctx, cfgStream); err != nil {
			t.Fatal(err)
		}
		r = startEvents(t, c, cfg)
		testwait.For(t, "the checkpoint at the end", func() bool {
			cp, err = c.Store().RelayCheckpoint(ctx, "feed", "queue.q")
			return err == nil && cp.Cursor == all[9].Cursor
		})
		stopEvents(t, r)
		got := readStream(t, ns.ClientURL(), stream)
		want := append(ids(all[:4]), ids(all[5:])...)
		checkIDs(t, got[:9], want) // in the order the broker stored them
		if len(got) != 10 || got[9].id != big.ID {
			t.Fatalf("the stream holds %d messages, the last %s; want 10, the refused event last", len(got), got[len(got)-1].id)
		}
		if cp.Published != 4+6 || cp.Duplicates != 5 || cp.LastError != "" {
			t.Fatalf("checkpoint %+v, want 10 published, 5 duplicates, no error", cp)
		}
	})
}
