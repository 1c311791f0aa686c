package main

// The registry and the event log tell the truth about a remote worker: a
// `backstop work --server` that drains cleanly reads stopped, with its
// host, its real pid and a last_seen from its end, and its worker.started
// and worker.stopped are in the log (issue 13: it read active, then stale,
// with pid 0 and last_seen at its start).

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
)

func TestRemoteWorkerRegistry(t *testing.T) {
	t.Parallel()
	for name, db := range map[string]func(t testing.TB) string{"sqlite": testdb.SQLite, "postgres": testdb.Postgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := db(t)
			c := remoteClient(t, db)
			ctx := context.Background()
			var ids []string
			for range 3 {
				r, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "remote", Kind: "ok", Payload: []byte(`{}`)})
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, r.Task.ID)
			}
			base := startServer(t, db)
			begun := time.Now()
			w := startRemoteWorker(t, base, "registry", []string{"BACKSTOP_TOKEN="}, "--id", "rw-registry", "--exit-after-idle", "1500ms")
			if code := w.wait(t, "remote worker"); code != 0 {
				t.Fatalf("remote worker exited %d", code)
			}
			var lastDone time.Time
			for _, id := range ids {
				task, err := c.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if task.State != backstop.StateSucceeded || task.FinalizedAt == nil {
					t.Fatalf("task %s: %s", id, task.State)
				}
				if task.FinalizedAt.After(lastDone) {
					lastDone = *task.FinalizedAt
				}
			}
			info, err := c.Worker(ctx, "rw-registry")
			if err != nil {
				t.Fatal(err)
			}
			host, _ := os.Hostname()
			if info.State != backstop.WorkerStopped || info.StoppedAt == nil || info.PID != w.cmd.Process.Pid || info.Host != host ||
				!info.Remote || len(info.Queues) != 1 || info.Queues[0] != "remote" {
				t.Fatalf("registry after a clean drain: %+v (want stopped, pid %d, host %q)", info.WorkerInfo, w.cmd.Process.Pid, host)
			}
			// last_seen is from the worker's end: after its last task and
			// its idle wait, well after it started.
			if info.LastSeen.Before(lastDone) || !info.LastSeen.After(begun.Add(time.Second)) {
				t.Fatalf("last_seen %s: the last task finished at %s, the worker started at %s", info.LastSeen, lastDone, begun)
			}
			var types []string
			testwait.For(t, "the worker's events", func() bool {
				page, err := c.ReadEvents(ctx, backstop.ReadEventsParams{Stream: "worker.rw-registry", Limit: 1000})
				if err != nil {
					t.Fatal(err)
				}
				types = types[:0]
				for _, e := range page.Events {
					if e.Type == "worker.started" || e.Type == "worker.stopped" {
						types = append(types, e.Type)
					}
				}
				return len(types) >= 2
			})
			if len(types) != 2 || types[0] != "worker.started" || types[1] != "worker.stopped" {
				t.Fatalf("worker events: %v", types)
			}
		})
	}
}
