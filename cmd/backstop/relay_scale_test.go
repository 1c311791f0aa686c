package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/testnats"
	"github.com/backstophq/backstop/internal/testwait"
)

// TestRelayScaleKilledBrokerStopped: messages of 100 keys are published in
// transactions of 250 while `backstop relay` is SIGKILLed every 3 seconds
// and restarted, and the JetStream server is stopped for 10 seconds in the
// middle. In the end the stream holds every message exactly once, each
// key's in commit order, and none was dead-lettered (the sink's retry
// policy outlasts the outage). 20,000 messages on SQLite; 10,000 on
// Postgres, where the relay, killed every 3 seconds, delivers about half
// as many per run (20,000 took 340 s there, twice SQLite's time).
func TestRelayScaleKilledBrokerStopped(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			total := 20000
			if st.name == "postgres" {
				total = 10000
			}
			const keys, batch = 100, 250
			db := st.url(t)
			_, c := storeClient(t, db)
			dir := t.TempDir()
			nsDir := t.TempDir()
			ns := testnats.Start(t, -1, nsDir)
			url, port := ns.ClientURL(), ns.Addr().(*net.TCPAddr).Port

			// The producer: transactions of 250 messages, as fast as they commit.
			want := map[string][]string{}
			published := make(chan struct{})
			go func() {
				defer close(published)
				for i := 0; i < total; i += batch {
					msgs := make([]backstop.Message, 0, batch)
					for j := i; j < i+batch; j++ {
						msgs = append(msgs, backstop.Message{Sink: "bus", Topic: "scale.orders", Key: fmt.Sprintf("k%02d", j%keys),
							Payload: []byte(fmt.Sprintf(`{"n":%d}`, j))})
					}
					res, err := c.Publish(context.Background(), msgs...)
					if err != nil {
						t.Error(err)
						return
					}
					for j, r := range res {
						k := msgs[j].Key
						want[k] = append(want[k], r.Task.ID)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}()

			start := func(n int) *worker {
				cmd := exec.Command(binary, "--db", db, "relay", "--sink", "bus="+url, "--lease", "2s", "--concurrency", "16")
				// Each relay lives 3 s: with the default 15 s leadership
				// lease, most would die before any became the leader that
				// settles the dead ones' expired leases.
				cmd.Env = append(os.Environ(), "BACKSTOP_LEADER_TTL=1s")
				return startProc(t, cmd, filepath.Join(dir, fmt.Sprintf("relay%d.stderr", n)), fmt.Sprintf("relay %d", n), 0)
			}
			delivered := func() int { return streamCount(t, url) }
			finished := func() bool {
				select {
				case <-published:
					return delivered() >= total
				default:
					return false
				}
			}
			kills := 0
			for n := 0; !finished(); n++ {
				if n > 80 {
					t.Fatalf("after %d relay runs, %d of %d messages delivered", n, delivered(), total)
				}
				r := start(n)
				time.Sleep(3 * time.Second)
				if n == 1 {
					// The broker goes away for 10 s while the relay runs.
					ns.Shutdown()
					ns.WaitForShutdown()
					time.Sleep(10 * time.Second)
					ns = testnats.Start(t, port, nsDir)
				}
				if finished() {
					break
				}
				_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
				r.wait(t, "killed relay")
				kills++
			}
			t.Logf("%d relay SIGKILLs, one 10 s broker outage", kills)
			testwait.For(t, "every message in the stream", func() bool { return delivered() >= total })
			got := streamIDs(t, url)
			seen := map[string]bool{}
			byKey := map[string][]string{}
			for _, m := range got {
				if seen[m[0]] {
					t.Fatalf("message %s in the stream twice", m[0])
				}
				seen[m[0]] = true
				byKey[m[1]] = append(byKey[m[1]], m[0])
			}
			if len(got) != total {
				t.Fatalf("%d messages in the stream, want %d", len(got), total)
			}
			for k, ids := range want {
				if strings.Join(byKey[k], ",") != strings.Join(ids, ",") {
					t.Fatalf("key %s arrived out of commit order (%d messages, want %d)", k, len(byKey[k]), len(ids))
				}
			}
			dead, err := c.DeadLetters(context.Background(), backstop.ListParams{Queue: "sink.bus"})
			if err != nil || len(dead) != 0 {
				t.Fatalf("dead letters: %d (%v), want none", len(dead), err)
			}
		})
	}
}
