package cli

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// remoteRegistry keeps a remote worker's row in the server's registry true
// (the worker protocol's register, heartbeat and stop): registered with
// its host and pid as it starts, seen every heartbeat interval the server
// asks for, stopping while it drains, stopped once it has. A failure is
// logged, never fatal: the registry is for operators, and the claims of a
// worker the server does not know register it too.
type remoteRegistry struct {
	cl       *apiclient.Client
	log      *slog.Logger
	req      api.RegisterWorkerRequest
	every    time.Duration
	draining atomic.Bool
	wake     chan struct{}
	quit     chan struct{}
	wg       sync.WaitGroup
}

// registryCallTimeout bounds one registry call.
const registryCallTimeout = 10 * time.Second

func startRemoteRegistry(cl *apiclient.Client, id string, queues []string, log *slog.Logger) *remoteRegistry {
	host, _ := os.Hostname()
	r := &remoteRegistry{cl: cl, log: log, every: 15 * time.Second, wake: make(chan struct{}, 1), quit: make(chan struct{}),
		req: api.RegisterWorkerRequest{ID: id, Host: host, PID: os.Getpid(), Queues: queues,
			Version: readBuildVersion().short(), Labels: runnerLabels(runnerExec)}}
	registered := r.register()
	r.wg.Go(func() { r.loop(registered) })
	return r
}

func (r *remoteRegistry) register() bool {
	ctx, cancel := context.WithTimeout(context.Background(), registryCallTimeout)
	defer cancel()
	reg, err := r.cl.RegisterWorker(ctx, r.req)
	if err != nil {
		r.log.Warn("worker registry: registering failed", "worker_id", r.req.ID, "error", err.Error())
		return false
	}
	if d := time.Duration(reg.HeartbeatInterval); d > 0 {
		r.every = d
	}
	return true
}

// loop heartbeats every interval; until the worker is registered (the
// server was unreachable as it started) it tries to register instead,
// every few seconds: a claim that reached the server first registered it
// without its host and pid.
func (r *remoteRegistry) loop(registered bool) {
	next := func() time.Duration {
		if registered {
			return r.every
		}
		return min(r.every, 5*time.Second)
	}
	t := time.NewTimer(next())
	defer t.Stop()
	for {
		select {
		case <-r.quit:
			return
		case <-t.C:
		case <-r.wake:
		}
		if !registered && !r.draining.Load() {
			registered = r.register()
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), registryCallTimeout)
			_, err := r.cl.WorkerHeartbeat(ctx, r.req.ID, r.draining.Load())
			cancel()
			var p *api.Problem
			switch {
			case errors.As(err, &p) && p.Status == 404 && !r.draining.Load():
				registered = r.register() // the server does not know it (a fresh database): again
			case err != nil:
				r.log.Warn("worker registry: heartbeat failed", "worker_id", r.req.ID, "error", err.Error())
			}
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(next())
	}
}

// drain says the worker stopped claiming (state stopping), now.
func (r *remoteRegistry) drain() {
	r.draining.Store(true)
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// stop ends the heartbeats and says the worker stopped.
func (r *remoteRegistry) stop() {
	close(r.quit)
	r.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), registryCallTimeout)
	defer cancel()
	if _, err := r.cl.StopWorker(ctx, r.req.ID); err != nil {
		r.log.Warn("worker registry: marking stopped failed", "worker_id", r.req.ID, "error", err.Error())
	}
}
