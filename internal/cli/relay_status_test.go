package cli

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/relay"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// backstop relay status, on the database and through the server (GET
// /v1/relay) alike: each sink's undelivered messages, lag, open dead
// letters and newest error; each checkpoint's events behind, lag and last
// error. Table and JSON; an argument exits 2.
func TestRelayStatusCLI(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		ctx := context.Background()
		r := newRemoteEnv(t, e, "viewer")
		c := e.client()
		// hook refuses every message (dead at once); bus has no relay.
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
		}))
		defer srv.Close()
		for _, m := range []backstop.Message{{Sink: "bus", Topic: "t", Payload: []byte(`1`)}, {Sink: "bus", Topic: "t", Payload: []byte(`2`)},
			{Sink: "hook", Topic: "t", Payload: []byte(`3`)}} {
			if _, err := c.Publish(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		hook, err := relay.Open(ctx, "hook", srv.URL, relay.Options{})
		if err != nil {
			t.Fatal(err)
		}
		rl, err := relay.New(c, relay.Config{Sinks: map[string]relay.Sink{"hook": hook}, Logger: slog.New(slog.DiscardHandler),
			Worker: backstop.WorkerConfig{PollInterval: 20 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		if err := rl.Start(ctx); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, "the refused message to dead-letter", func() bool {
			ts, err := c.List(ctx, backstop.ListParams{Queue: "sink.hook", States: []backstop.State{backstop.StateDead}})
			return err == nil && len(ts) == 1
		})
		if err := rl.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "evq", Kind: "k"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Store().SaveRelayCheckpoint(ctx, store.RelayCheckpointUpdate{Name: "feed", Stream: "queue.evq", Sink: "bus",
			Error: "nats: no responders", Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		from := time.Now().Add(-time.Hour)
		if err := c.Store().SaveIngestPosition(ctx, store.IngestPosition{Group: "backstop-ingest-results", Topic: "uptime",
			Queue: "results", Holder: "ing-1", LagMessages: 12, LagFrom: &from, UpdatedAt: time.Now(), LastError: "database down"}); err != nil {
			t.Fatal(err)
		}

		var st relay.Status
		testwait.For(t, "the checkpoint's events to be readable", func() bool {
			if err := json.Unmarshal([]byte(e.ok("relay", "status", "-o", "json")), &st); err != nil {
				t.Fatal(err)
			}
			return len(st.Checkpoints) == 1 && st.Checkpoints[0].EventsBehind == 3
		})
		if len(st.Sinks) != 2 || st.Sinks[0].Sink != "bus" || st.Sinks[0].Pending != 2 || st.Sinks[0].Dead != 0 ||
			st.Sinks[1].Sink != "hook" || st.Sinks[1].Pending != 0 || st.Sinks[1].Dead != 1 || !strings.Contains(st.Sinks[1].LastError, "413") {
			t.Fatalf("sinks: %+v", st.Sinks)
		}
		cp := st.Checkpoints[0]
		if cp.Name != "feed" || cp.Stream != "queue.evq" || cp.LastError != "nats: no responders" || cp.LagSeconds <= 0 || cp.EventsBehindCapped {
			t.Fatalf("checkpoint: %+v", cp)
		}
		remote := r.remote("", "relay", "status", "-o", "json")
		var rst relay.Status
		if remote.code != 0 || json.Unmarshal([]byte(remote.stdout), &rst) != nil || len(rst.Sinks) != 2 || len(rst.Checkpoints) != 1 ||
			rst.Checkpoints[0].EventsBehind != 3 || rst.Sinks[1].Dead != 1 {
			t.Fatalf("--server: exit %d: %s %s", remote.code, remote.stdout, remote.stderr)
		}
		table := e.ok("relay", "status")
		if len(st.Ingesters) != 1 || st.Ingesters[0].Holder != "ing-1" || st.Ingesters[0].LagSeconds < 3590 {
			t.Fatalf("ingesters: %+v", st.Ingesters)
		}
		for _, want := range []string{"sink.bus", "sink.hook", "feed", "queue.evq", "nats: no responders", "413",
			"backstop-ingest-results", "uptime", "ing-1", "1h0m", "database down"} {
			if !strings.Contains(table, want) {
				t.Errorf("the table lacks %q:\n%s", want, table)
			}
		}
		if res := e.run("", "relay", "status", "extra"); res.code != ExitUsage {
			t.Fatalf("relay status extra: exit %d, want %d", res.code, ExitUsage)
		}
	})
}
