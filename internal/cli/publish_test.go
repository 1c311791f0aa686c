package cli

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/testdb"
)

// backstop publish writes one message task on the sink's queue, on the
// database and through a server alike; bad input exits 2 both ways and
// writes nothing.
func TestPublishCLI(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		r := newRemoteEnv(t, e, "operator")
		args := []string{"publish", "--sink", "bus", "--topic", "orders.created", "--key", "o-1", "--header", "X-Tenant=acme", "--attr", "corr=c1", "--payload", `{"id":1}`}
		local := strings.TrimSpace(e.ok(args...))
		remote := r.remote("", args...)
		if remote.code != 0 {
			t.Fatalf("--server: exit %d: %s", remote.code, remote.stderr)
		}
		for _, bad := range [][]string{
			{"publish", "--sink", "bus", "--topic", "t", "--payload", "{nope"},
			{"publish", "--sink", "bus", "--topic", "t"},
			{"publish", "--sink", "bus", "--topic", "t", "--header", "novalue", "--payload", "{}"},
			{"publish", "--sink", "a b", "--topic", "t", "--payload", "{}"},
		} {
			if res := e.run("", bad...); res.code != ExitUsage {
				t.Errorf("%v: exit %d, want %d: %s", bad, res.code, ExitUsage, res.stderr)
			}
			if res := r.remote("", bad...); res.code != ExitUsage {
				t.Errorf("--server %v: exit %d, want %d: %s", bad, res.code, ExitUsage, res.stderr)
			}
		}
		c := e.client()
		ts, err := c.List(context.Background(), backstop.ListParams{Queue: "sink.bus"})
		if err != nil || len(ts) != 2 {
			t.Fatalf("sink.bus holds %d tasks (%v), want 2", len(ts), err)
		}
		for _, id := range []string{local, strings.TrimSpace(remote.stdout)} {
			task, err := c.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			var m backstop.Message
			if err := json.Unmarshal(task.Payload, &m); err != nil || m.Topic != "orders.created" || m.Headers["X-Tenant"] != "acme" ||
				task.Kind != backstop.MessageKind || task.OrderingKey != "o-1" || task.Attributes["corr"] != "c1" {
				t.Fatalf("task %s: %+v (%v)", id, task, err)
			}
		}
	})
}

// backstop relay refuses bad sinks with exit 2, naming the problem, before
// it connects to anything.
func TestRelayFlags(t *testing.T) {
	t.Parallel()
	e := &cliEnv{t: t, db: testdb.SQLite(t)}
	cfg := t.TempDir() + "/c.yaml"
	if err := os.WriteFile(cfg, []byte("sinks:\n  bus:\n    url: ftp://h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The relay: section: checked naming its keys, and the defaults of
	// the flags (relay.sinks are the relay's sinks).
	const two = "sinks:\n  bus: {url: 'nats://h:1'}\n  hook: {url: 'http://h:1/in'}\n"
	badSinks, oneSink := t.TempDir()+"/bad.yaml", t.TempDir()+"/one.yaml"
	if err := os.WriteFile(badSinks, []byte(two+"relay: {sinks: [nope]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(oneSink, []byte(two+"relay: {sinks: [bus]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		want string
		args []string
	}{
		{"no sink", []string{"relay"}},
		{"want NAME=URL", []string{"relay", "--sink", "bus"}},
		{"scheme must be one of", []string{"relay", "--sink", "bus=amqp://h:1"}},
		{"missing host", []string{"relay", "--sink", "bus=nats://"}},
		{"given twice", []string{"relay", "--sink", "bus=nats://h:1", "--sink", "bus=nats://h:2"}},
		{"sinks.bus.url", []string{"relay", "--config", cfg}},
		{"--concurrency", []string{"relay", "--sink", "bus=nats://h:1", "--concurrency", "0"}},
		{`relay.sinks[0]: "nope": no such sink under sinks:`, []string{"relay", "--config", badSinks}},
		{"--streams-sink hook: not a sink of this relay (bus)", []string{"relay", "--config", oneSink, "--streams", "all", "--streams-sink", "hook"}},
	} {
		e.fails(ExitUsage, tc.want, tc.args...)
	}
}
