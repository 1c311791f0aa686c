package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/relay"
	"github.com/backstophq/backstop/internal/testnats"
	"github.com/backstophq/backstop/internal/testwait"
)

// From the command line alone: messages written with `backstop publish`
// (several keys) reach a real JetStream exactly once each, in publish
// order per key, while `backstop relay` is SIGKILLed three times and
// restarted. Bad input to publish exits 2 and writes nothing.
func TestRelayCLIKilled(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			db := st.url(t)
			_, c := storeClient(t, db)
			ns := testnats.Start(t, -1, t.TempDir())

			run := func(args ...string) (string, int) {
				out, err := exec.Command(binary, append([]string{"--db", db}, args...)...).CombinedOutput()
				if ee, ok := err.(*exec.ExitError); ok {
					return string(out), ee.ExitCode()
				} else if err != nil {
					t.Fatal(err)
				}
				return string(out), 0
			}
			for _, bad := range [][]string{
				{"publish", "--sink", "bus", "--topic", "t", "--payload", "{nope"},
				{"publish", "--sink", "bus", "--topic", "has space", "--payload", "{}"},
				{"publish", "--sink", "bus", "--topic", "t", "--header", "bad header=1", "--payload", "{}"},
				{"publish", "--topic", "t", "--payload", "{}"},
			} {
				if out, code := run(bad...); code != 2 {
					t.Fatalf("%v: exit %d, want 2: %s", bad, code, out)
				}
			}

			const keys, per = 4, 10
			want := map[string][]string{}
			publish := func(i int) {
				for k := range keys {
					key := fmt.Sprintf("k%d", k)
					out, code := run("publish", "--sink", "bus", "--topic", "cli."+key, "--key", key, "--header", "X-I="+fmt.Sprint(i), "--payload", fmt.Sprintf(`{"i":%d}`, i))
					if code != 0 {
						t.Fatalf("publish: exit %d: %s", code, out)
					}
					want[key] = append(want[key], strings.TrimSpace(out))
				}
			}
			for i := range per / 2 {
				publish(i)
			}
			dir := t.TempDir()
			start := func(n int) *worker {
				cmd := exec.Command(binary, "--db", db, "relay", "--sink", "bus="+ns.ClientURL(), "--lease", "1s", "--concurrency", "4")
				// A restarted relay settles what the killed one held once it
				// leads: after 1 s, not the default 15 s leadership lease.
				cmd.Env = append(os.Environ(), "BACKSTOP_LEADER_TTL=1s")
				return startProc(t, cmd, filepath.Join(dir, fmt.Sprintf("relay%d.stderr", n)), fmt.Sprintf("relay %d", n), 0)
			}
			count := func() int { return streamCount(t, ns.ClientURL()) }
			for n := range 3 {
				r := start(n)
				before := count()
				// A fast relay may deliver all that is left before the
				// count is read: then there is nothing more to wait for.
				testwait.For(t, "the relay to deliver", func() bool { n := count(); return n > before || n >= keys*per })
				_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
				r.wait(t, "killed relay")
				if n == 0 {
					for i := per / 2; i < per; i++ {
						publish(i)
					}
				}
			}
			start(3)
			testwait.For(t, "every message in the stream", func() bool { return count() >= keys*per })
			got := streamIDs(t, ns.ClientURL())
			seen := map[string]bool{}
			byKey := map[string][]string{}
			for _, m := range got {
				if seen[m[0]] {
					t.Fatalf("message %s in the stream twice", m[0])
				}
				seen[m[0]] = true
				byKey[m[1]] = append(byKey[m[1]], m[0])
			}
			for k, ids := range want {
				if strings.Join(byKey[k], ",") != strings.Join(ids, ",") {
					t.Fatalf("key %s arrived as %v, want %v", k, byKey[k], ids)
				}
			}
			for _, ids := range want {
				for _, id := range ids {
					testwait.For(t, "message "+id+" settled", func() bool {
						task, err := c.Get(context.Background(), id)
						return err == nil && task.State == backstop.StateSucceeded
					})
				}
			}
		})
	}
}

// relayStreamInfo reads the relay stream's state (its stream and info are
// nil before the relay created it); the caller closes the connection.
func relayStreamInfo(t *testing.T, url string) (jetstream.Stream, *jetstream.StreamInfo, func()) {
	t.Helper()
	ctx := context.Background()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, relay.NatsStreamName("bus"))
	if err != nil {
		return nil, nil, nc.Close
	}
	info, err := st.Info(ctx)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	return st, info, nc.Close
}

// streamCount is how many messages the relay stream holds (0 before the
// relay created it): one request, for the waits that poll it; streamIDs
// fetches each message.
func streamCount(t *testing.T, url string) int {
	t.Helper()
	_, info, done := relayStreamInfo(t, url)
	defer done()
	if info == nil {
		return 0
	}
	return int(info.State.Msgs)
}

// streamIDs lists the relay stream's messages as [id, key], in order.
func streamIDs(t *testing.T, url string) [][2]string {
	t.Helper()
	ctx := context.Background()
	st, info, done := relayStreamInfo(t, url)
	defer done()
	if st == nil {
		return nil
	}
	var out [][2]string
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, [2]string{m.Header.Get(jetstream.MsgIDHeader), m.Header.Get("Backstop-Key")})
	}
	return out
}
