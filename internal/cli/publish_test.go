package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
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
