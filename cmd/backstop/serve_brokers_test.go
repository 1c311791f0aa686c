package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/testnats"
	"github.com/backstophq/backstop/internal/testwait"
)

// `backstop serve --config` runs the relay: section's relay (messages of
// its sinks, event streams from their checkpoint) and the ingest: list's
// ingesters in-process: a published message reaches JetStream, messages
// on an ingested subject become tasks, the checkpoint is the configured
// one. A bad entry is refused at start with the key named, exit 2.
func TestServeRunsRelayAndIngest(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := st.url(t)
			_, c := storeClient(t, db)
			ns := testnats.Start(t, -1, t.TempDir())
			nc, err := nats.Connect(ns.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			js, _ := jetstream.New(nc)
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			cfg := filepath.Join(dir, "backstop.yaml")
			yaml := fmt.Sprintf(`sinks:
  bus: {url: %q}
relay:
  sinks: [bus]
  streams: [queue.orders]
  checkpoint: feed
ingest:
  - {from: %q, subject: orders.created, queue: orders, kind: created, id_header: Nats-Msg-Id, ack_wait: 1s}
`, ns.ClientURL(), ns.ClientURL())
			if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			addr := freeAddr(t)
			startServeProc(t, addr, []string{"BACKSTOP_LEADER_TTL=1s"}, "--db", db, "serve", "--dev", "--addr", addr, "--config", cfg)

			rs, err := c.Publish(ctx, backstop.Message{Sink: "bus", Topic: "t.x", Key: "k", Payload: []byte(`{"n":1}`)})
			if err != nil {
				t.Fatal(err)
			}
			testwait.For(t, "the message in JetStream", func() bool {
				return slices.ContainsFunc(streamIDs(t, ns.ClientURL()), func(m [2]string) bool { return m[0] == rs[0].Task.ID })
			})
			for i := range 5 {
				m := &nats.Msg{Subject: "orders.created", Data: fmt.Appendf(nil, `{"i":%d}`, i), Header: nats.Header{}}
				m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("o-%d", i))
				if _, err := js.PublishMsg(ctx, m); err != nil {
					t.Fatal(err)
				}
			}
			testwait.For(t, "5 ingested tasks", func() bool {
				ts, err := c.List(ctx, backstop.ListParams{Queue: "orders", WithoutPayload: true})
				return err == nil && len(ts) == 5
			})
			if _, err := c.Get(ctx, "o-3"); err != nil {
				t.Fatalf("task o-3: %v", err)
			}
			cps, err := c.Store().ListRelayCheckpoints(ctx)
			if err != nil || len(cps) != 1 || cps[0].Name != "feed" || cps[0].Stream != "queue.orders" || cps[0].Sink != "bus" {
				t.Fatalf("checkpoints %+v (%v), want feed/queue.orders/bus", cps, err)
			}
			testwait.For(t, "the queue's events published from the checkpoint", func() bool {
				cps, err := c.Store().ListRelayCheckpoints(ctx)
				return err == nil && cps[0].Published > 0
			})

			for _, bad := range []struct{ yaml, want string }{
				{fmt.Sprintf("ingest:\n  - {from: %q, queue: q, kind: k}\n", ns.ClientURL()), "ingest[0].subject is required"},
				{fmt.Sprintf("sinks:\n  bus: {url: %q}\nrelay: {sinks: [nope]}\n", ns.ClientURL()), `relay.sinks[0]: "nope": no such sink`},
			} {
				if err := os.WriteFile(cfg, []byte(bad.yaml), 0o644); err != nil {
					t.Fatal(err)
				}
				_, stderr, code := runCLI(t, db, "serve", "--dev", "--addr", freeAddr(t), "--config", cfg)
				if code != 2 || !strings.Contains(stderr, bad.want) {
					t.Errorf("serve with %q: exit %d, stderr %q; want 2 and %q", bad.yaml, code, stderr, bad.want)
				}
			}
		})
	}
}
