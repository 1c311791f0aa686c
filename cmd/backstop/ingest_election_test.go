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
	"github.com/backstophq/backstop/internal/testnats"
	"github.com/backstophq/backstop/internal/testwait"
)

// Two `backstop ingest` processes of one subject and group: one is elected
// and ingests while the other waits; the leader is SIGKILLed mid-way and
// the other takes over within the lease's TTL (the messages the dead one
// had read and not acked come back after --ack-wait). Every message is one
// task: nothing lost, nothing enqueued twice.
func TestIngestElectionKilled(t *testing.T) {
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
			js, _ := jetstream.New(nc)
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "UPTIME", Subjects: []string{"uptime.>"}}); err != nil {
				t.Fatal(err)
			}
			const total = 600
			for i := range total {
				if _, err := js.Publish(ctx, "uptime.results", fmt.Appendf(nil, `{"id":"r-%d"}`, i)); err != nil {
					t.Fatal(err)
				}
			}
			nc.Close()
			dir := t.TempDir()
			start := func(name string) *worker {
				cmd := exec.Command(binary, "--db", db, "ingest", "--id", name, "--from", ns.ClientURL(), "--subject", "uptime.results",
					"--queue", "results", "--kind", "check", "--id-field", "id", "--batch", "1", "--ack-wait", "1s")
				cmd.Env = append(os.Environ(), "BACKSTOP_LEADER_TTL=1s")
				return startProc(t, cmd, filepath.Join(dir, name+".stderr"), name, 0)
			}
			led := func(name string) bool {
				b, _ := os.ReadFile(filepath.Join(dir, name+".stderr"))
				return strings.Contains(string(b), `"msg":"ingest.backstop-ingest-results.uptime.results leadership taken"`)
			}
			count := func() int {
				ts, err := c.List(ctx, backstop.ListParams{Queue: "results", Limit: 10000, WithoutPayload: true})
				if err != nil {
					t.Fatal(err)
				}
				return len(ts)
			}
			a := start("a")
			testwait.For(t, "a to lead", func() bool { return led("a") })
			start("b")
			testwait.For(t, "a to ingest 200", func() bool { return count() >= 200 })
			if led("b") {
				t.Fatal("b led while a was alive")
			}
			_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
			a.wait(t, "killed leader")
			at := count()
			if at >= total {
				t.Fatalf("a ingested everything (%d) before it was killed: nothing proven", at)
			}
			t.Logf("leader killed at %d tasks", at)
			testwait.For(t, "b to take over", func() bool { return led("b") })
			testwait.For(t, "every message a task", func() bool { return count() >= total })
			if n := count(); n != total {
				t.Fatalf("%d tasks, want %d", n, total)
			}
		})
	}
}
