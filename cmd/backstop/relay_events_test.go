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
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/testnats"
	"github.com/backstophq/backstop/internal/testwait"
)

// `backstop relay --streams` while events flow: the relay is SIGKILLed
// three times and restarted; in the end JetStream holds every event of the
// stream exactly once, in log order (what a killed relay published after
// its last checkpoint comes again and the broker removes the repeat). Bad
// --streams flags exit 2 and write no checkpoint.
func TestRelayEventsCLIKilled(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := st.url(t)
			s, c := storeClient(t, db)
			ns := testnats.Start(t, -1, t.TempDir())
			bus := "bus=" + ns.ClientURL()

			for _, bad := range [][]string{
				{"--sink", bus, "--streams", "bogus"},
				{"--sink", bus, "--streams", "all,queue.ev"},
				{"--sink", bus, "--streams", "queue.ev,queue.ev"},
				{"--sink", bus, "--sink", "hook=http://127.0.0.1:1/in", "--streams", "queue.ev"},
				{"--sink", bus, "--streams", "queue.ev", "--streams-sink", "nope"},
				{"--sink", bus, "--streams", "queue.ev", "--streams-topic", "a.{type}.b"},
				{"--sink", bus, "--checkpoint", "cp"},
				{"--sink", bus, "--streams", "queue.ev", "--from", "now"},
				{"--sink", bus, "--from", "end"},
			} {
				// A bad flag ends the command at once; a relay that starts
				// runs until killed (the timeout), which fails below.
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				out, err := exec.CommandContext(cctx, binary, append([]string{"--db", db, "relay"}, bad...)...).CombinedOutput()
				cancel()
				if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
					t.Fatalf("relay %v: %v, want exit 2: %s", bad, err, out)
				}
			}
			if cps, err := s.ListRelayCheckpoints(ctx); err != nil || len(cps) != 0 {
				t.Fatalf("bad flags wrote checkpoints: %v %v", cps, err)
			}

			// 400 events flow from the start, 20 more in each round: the
			// relay publishes a page (up to 500) as one batch, so the events
			// a round waits for must be new to it.
			const flowing, perRound = 400, 20
			const total = flowing + 3*perRound
			produced := make(chan struct{})
			go func() {
				defer close(produced)
				for i := range flowing {
					if _, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "ev", Kind: "k", Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))}); err != nil {
						t.Error(err)
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}()
			dir := t.TempDir()
			start := func(n int) *worker {
				cmd := exec.Command(binary, "--db", db, "relay", "--sink", bus, "--streams", "queue.ev", "--checkpoint", "feed")
				// A restarted relay takes over the stream once it leads:
				// after 1 s, not the default 15 s leadership lease.
				cmd.Env = append(os.Environ(), "BACKSTOP_LEADER_TTL=1s")
				return startProc(t, cmd, filepath.Join(dir, fmt.Sprintf("relay%d.stderr", n)), fmt.Sprintf("relay %d", n), 0)
			}
			count := func() int { return streamCount(t, ns.ClientURL()) }
			for n := range 3 {
				r := start(n)
				before := count()
				for i := range perRound {
					if _, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "ev", Kind: "k", Payload: []byte(fmt.Sprintf(`{"round":%d,"i":%d}`, n, i))}); err != nil {
						t.Fatal(err)
					}
				}
				testwait.For(t, "the relay to publish", func() bool { return count() > before })
				_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
				r.wait(t, "killed relay")
			}
			<-produced
			start(3)
			var want []string
			after := ""
			for {
				page, err := c.ReadEvents(ctx, backstop.ReadEventsParams{Stream: "queue.ev", After: after, Limit: 1000})
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range page.Events {
					want = append(want, e.ID)
				}
				after = page.Next
				if len(want) >= total {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			testwait.For(t, "every event in the stream", func() bool { return count() >= len(want) })
			var got []string
			for _, m := range streamIDs(t, ns.ClientURL()) {
				got = append(got, m[0])
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("the stream holds %d events, want %d in log order:\n%v\n%v", len(got), len(want), got, want)
			}
			// Each event is counted once, by the process that saved the
			// checkpoint past it (a repeat it published is also counted
			// as a duplicate).
			testwait.For(t, "the checkpoint to catch up", func() bool {
				cp, err := s.RelayCheckpoint(ctx, "feed", "queue.ev")
				return err == nil && cp.Published == int64(len(want))
			})
			if cp, _ := s.RelayCheckpoint(ctx, "feed", "queue.ev"); cp.Duplicates > 0 {
				t.Logf("the broker removed %d repeats", cp.Duplicates)
			}
		})
	}
}

// Two `backstop relay --streams` processes on one checkpoint: one is
// elected and publishes while the other waits; the leader is SIGKILLed
// with events flowing and the other takes over within the lease's TTL.
// The broker holds every event once, in log order, and only the elected
// process's log says it led before the kill.
func TestRelayEventsElectionKilled(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := st.url(t)
			_, c := storeClient(t, db)
			ns := testnats.Start(t, -1, t.TempDir())
			dir := t.TempDir()
			start := func(name string) *worker {
				cmd := exec.Command(binary, "--db", db, "relay", "--sink", "bus="+ns.ClientURL(), "--streams", "queue.ev", "--checkpoint", "feed", "--id", name)
				cmd.Env = append(os.Environ(), "BACKSTOP_LEADER_TTL=1s")
				return startProc(t, cmd, filepath.Join(dir, name+".stderr"), name, 0)
			}
			led := func(name string) bool {
				b, _ := os.ReadFile(filepath.Join(dir, name+".stderr"))
				return strings.Contains(string(b), `"msg":"relay.feed leadership taken"`)
			}
			a := start("a")
			testwait.For(t, "a to lead", func() bool { return led("a") })
			start("b")
			const total = 300
			produced := make(chan struct{})
			go func() {
				defer close(produced)
				for i := range total {
					if _, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "ev", Kind: "k", Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))}); err != nil {
						t.Error(err)
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}()
			count := func() int { return streamCount(t, ns.ClientURL()) }
			testwait.For(t, "a to publish", func() bool { return count() > 50 })
			if led("b") {
				t.Fatal("b led while a was alive")
			}
			_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
			a.wait(t, "killed leader")
			testwait.For(t, "b to take over", func() bool { return led("b") })
			<-produced
			var want []string
			after := ""
			for len(want) < total {
				page, err := c.ReadEvents(ctx, backstop.ReadEventsParams{Stream: "queue.ev", After: after, Limit: 1000})
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range page.Events {
					want = append(want, e.ID)
				}
				after = page.Next
				time.Sleep(10 * time.Millisecond)
			}
			testwait.For(t, "every event in the stream", func() bool { return count() >= len(want) })
			var got []string
			for _, m := range streamIDs(t, ns.ClientURL()) {
				got = append(got, m[0])
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("the stream holds %d events, want %d in log order", len(got), len(want))
			}
		})
	}
}
