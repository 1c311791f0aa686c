package ingest

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/backstophq/backstop/internal/leadership"
)

// Election makes the ingesters of one topic (or subject) and group take
// turns: only the candidate holding the lease Source.LeaseName reads and
// enqueues; another takes over within TTL when it dies, at once when it
// stops. The broker's own failover (Kafka's group rebalance, a JetStream
// message redelivered after AckWait) hands the new leader what the old
// one read and had not committed; the enqueue is idempotent, so nothing is
// lost or doubled.
type Election struct {
	// Store holds the lease (store.Store satisfies it). Required.
	Store leadership.Store
	// ID names this candidate in the lease. Required.
	ID string
	// TTL: how long the lease lasts without renewal. Required.
	TTL time.Duration
	// Now is the store's clock. Default: time.Now.
	Now func() time.Time
}

// RunElected runs Run while this candidate holds the lease of src's topic
// and group, and stops it (nothing uncommitted is acked) as soon as it
// does not. It returns when ctx ends (after resigning), or when Run ends
// by itself (Source.IdleExit, or an error such as a subject no stream
// covers).
func RunElected(ctx context.Context, src Source, in *Ingester, e Election, log *slog.Logger) error {
	if e.Store == nil || e.ID == "" || e.TTL <= 0 {
		return errors.New("ingest: an election needs a store, the candidate's ID and a TTL")
	}
	if log == nil {
		log = in.log
	}
	el := leadership.New(e.Store, leadership.Config{Name: src.LeaseName(in.m.Queue), ID: e.ID, TTL: e.TTL, Now: e.Now, Logger: log})
	tick := time.NewTicker(max(e.TTL/6, 10*time.Millisecond))
	defer tick.Stop()
	var run *running // nil: not running
	stop := func() error {
		if run == nil {
			return nil
		}
		run.cancel()
		err := <-run.done
		run = nil
		return err
	}
	var done <-chan error // run's, while it runs
	for {
		el.Round(ctx)
		switch leading := el.IsLeader(); {
		case leading && run == nil:
			run = startRun(ctx, src, in, log)
			done = run.done
		case !leading && run != nil:
			if err := stop(); err != nil {
				log.Warn("ingest: stopped on losing the lease", "lease", el.Name(), "error", err)
			}
			done = nil
		}
		select {
		case <-ctx.Done():
			err := stop()
			el.Resign()
			return err
		case err := <-done:
			run.cancel()
			el.Resign()
			return err
		case <-tick.C:
		}
	}
}

// running is one Run of an elected ingester.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func startRun(ctx context.Context, src Source, in *Ingester, log *slog.Logger) *running {
	ctx, cancel := context.WithCancel(ctx)
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- Run(ctx, src, in, log) }()
	return r
}
