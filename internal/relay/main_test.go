package relay_test

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/relay"
	"github.com/backstophq/backstop/internal/testwait"
)

// fastRetry retries every 20-100ms, so failure paths run in test time.
var fastRetry = &backstop.RetryPolicy{Base: backstop.Duration(20 * time.Millisecond), Factor: 2, Max: backstop.Duration(100 * time.Millisecond)}

// client opens db (migrated) with cfg (nil: defaults) and fast retries.
func client(t testing.TB, db string, cfg *backstop.Config) *backstop.Client {
	t.Helper()
	ctx := context.Background()
	s, err := dburl.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if cfg == nil {
		cfg = &backstop.Config{}
	}
	if cfg.Retry == nil {
		cfg.Retry = fastRetry
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	c, err := backstop.NewClient(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startRelay runs a relay of sinks over c until the test ends.
func startRelay(t *testing.T, c *backstop.Client, sinks map[string]relay.Sink) *relay.Relay {
	t.Helper()
	return startRelayWith(t, c, relay.Config{Sinks: sinks})
}

func startRelayWith(t *testing.T, c *backstop.Client, cfg relay.Config) *relay.Relay {
	t.Helper()
	r, err := relay.New(c, relay.Config{Sinks: cfg.Sinks, MeterProvider: cfg.MeterProvider, Logger: slog.New(slog.DiscardHandler),
		Worker: backstop.WorkerConfig{PollInterval: 20 * time.Millisecond, MaintenanceInterval: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return r
}

func portOf(t *testing.T, s *server.Server) int {
	_, p, err := net.SplitHostPort(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

func openSink(t *testing.T, name, url string, o relay.Options) relay.Sink {
	t.Helper()
	s, err := relay.Open(context.Background(), name, url, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// streamMsg is one message read back from a stream.
type streamMsg struct {
	id, key, subject string
	data             []byte
	headers          nats.Header
}

// readStream reads every message of stream, in stream order.
func readStream(t *testing.T, url, stream string) []streamMsg {
	t.Helper()
	ctx := context.Background()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []streamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, streamMsg{id: m.Header.Get(jetstream.MsgIDHeader), key: m.Header.Get("Backstop-Key"),
			subject: m.Subject, data: m.Data, headers: m.Header})
	}
	return out
}

// waitState waits until task id is in state st.
func waitState(t *testing.T, c *backstop.Client, id string, st backstop.State) *backstop.Task {
	t.Helper()
	var task *backstop.Task
	testwait.For(t, "task "+id+" to be "+string(st), func() bool {
		var err error
		task, err = c.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return task.State == st
	})
	return task
}
