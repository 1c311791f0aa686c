package api_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/testwait"
)

// TestRemoteWorkerRegistryAPI: the worker protocol's register, heartbeat
// and stop keep a remote worker's row true (host, pid, last_seen,
// stopping, stopped) and write its worker.* events; bad input is 400 and
// writes nothing, an unknown worker 404, a viewer 403.
func TestRemoteWorkerRegistryAPI(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(t *testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{})
		ctx := context.Background()
		op := b.as[api.RoleOperator]
		reg, err := op.RegisterWorker(ctx, api.RegisterWorkerRequest{ID: "rw-api", Host: "node-x", PID: os.Getpid(), Queues: []string{"q"}})
		if err != nil {
			t.Fatal(err)
		}
		if reg.State != backstop.WorkerActive || reg.Host != "node-x" || reg.PID != os.Getpid() || !reg.Remote || reg.HeartbeatInterval <= 0 {
			t.Fatalf("registered: %+v", reg)
		}
		b.clock.Advance(time.Second)
		beat, err := op.WorkerHeartbeat(ctx, "rw-api", false)
		if err != nil || !beat.LastSeen.After(reg.LastSeen) || beat.State != backstop.WorkerActive {
			t.Fatalf("heartbeat: %+v %v", beat, err)
		}
		if d, err := op.WorkerHeartbeat(ctx, "rw-api", true); err != nil || d.State != backstop.WorkerStopping {
			t.Fatalf("draining: %+v %v", d, err)
		}
		stopped, err := op.StopWorker(ctx, "rw-api")
		if err != nil || stopped.State != backstop.WorkerStopped || stopped.StoppedAt == nil {
			t.Fatalf("stop: %+v %v", stopped, err)
		}
		var p *api.Problem
		if _, err := op.WorkerHeartbeat(ctx, "nobody", false); !errors.As(err, &p) || p.Status != http.StatusNotFound {
			t.Fatalf("unknown worker: %v", err)
		}
		if _, err := b.as[api.RoleViewer].StopWorker(ctx, "rw-api"); !errors.As(err, &p) || p.Status != http.StatusForbidden {
			t.Fatalf("viewer: %v", err)
		}
		for _, body := range []string{`{"id":"bad id!","host":"h","pid":1,"queues":["q"]}`, `{"id":"w","host":"h","pid":1,"queues":[]}`,
			`{"id":"w","host":"h","pid":-1,"queues":["q"]}`, `{"id":"w","queues":["q"],"bogus":1}`} {
			if code, out := b.raw(t, api.RoleOperator, "POST", "/v1/workers", "application/json", body); code != http.StatusBadRequest {
				t.Fatalf("register %s: %d %s", body, code, out)
			}
		}
		if _, err := b.lib.Worker(ctx, "w"); !errors.Is(err, backstop.ErrNotFound) {
			t.Fatalf("a refused registration wrote: %v", err)
		}
		var types []string
		testwait.For(t, "the worker's events", func() bool {
			page, err := op.Events(ctx, backstop.ReadEventsParams{Stream: "worker.rw-api", Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			types = types[:0]
			for _, e := range page.Events {
				types = append(types, e.Type+"/"+e.Actor)
			}
			return len(types) >= 2
		})
		if len(types) != 2 || types[0] != "worker.started/test-operator" || types[1] != "worker.stopped/test-operator" {
			t.Fatalf("events: %v", types)
		}
	})
}
