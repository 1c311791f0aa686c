package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
)

// testHeartbeatRacesSettle: a worker's heartbeat batch runs while its
// completer settles the same attempts in chunks (the hot path under load).
// Neither may fail (no deadlock, no lock wait error), every settlement
// applies once, a beat never resurrects a settled task, and a beat sent
// after a task's settlement committed reports the lease lost. A beat that
// meets a settlement in flight may answer either way (on Postgres a batch
// skips a row another transaction holds and answers from its snapshot:
// still held); docs/events.md.
func (s *suite) testHeartbeatRacesSettle(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	const n, chunk = 300, 20
	params := make([]backstop.EnqueueParams, n)
	for i := range params {
		params[i] = backstop.EnqueueParams{ID: fmt.Sprintf("hr-%03d", i), Queue: "hr", Kind: "k"}
	}
	if _, err := b.c.EnqueueMany(b.ctx, params); err != nil {
		t.Fatal(err)
	}
	tasks := claim(t, b, "hr", n)
	eq(t, "claimed", len(tasks), n)
	beats := make([]store.Beat, n)
	for i, task := range tasks {
		beats[i] = store.Beat{TaskID: task.ID, ExecutionID: task.ExecutionID}
	}

	var (
		mu      sync.Mutex
		settled = map[string]bool{} // committed settlements
		done    = make(chan struct{})
		errs    = make(chan error, 2)
		wg      sync.WaitGroup
	)
	wg.Add(2)
	go func() { // the completer: chunks in reverse id order
		defer wg.Done()
		defer close(done)
		for end := n; end > 0; end -= chunk {
			var ss []store.Settlement
			for _, task := range tasks[max(end-chunk, 0):end] {
				ss = append(ss, store.Settlement{TaskID: task.ID, ExecutionID: task.ExecutionID,
					Outcome: backstop.OutcomeSucceeded, FinishedAt: b.clock.Now(), State: backstop.StateSucceeded})
			}
			ok, err := b.store.Settle(b.ctx, ss)
			if err != nil {
				errs <- fmt.Errorf("settle: %w", err)
				return
			}
			mu.Lock()
			for i, applied := range ok {
				if !applied {
					errs <- fmt.Errorf("settlement of %s not applied", ss[i].TaskID)
				}
				settled[ss[i].TaskID] = true
			}
			mu.Unlock()
		}
	}()
	go func() { // the heartbeat loop
		defer wg.Done()
		for round := 0; ; round++ {
			mu.Lock()
			before := make(map[string]bool, len(settled))
			for id := range settled {
				before[id] = true
			}
			mu.Unlock()
			now := b.clock.Now()
			res, err := b.store.Heartbeat(b.ctx, beats, now, now.Add(time.Minute))
			if err != nil {
				errs <- fmt.Errorf("heartbeat: %w", err)
				return
			}
			if len(res) != n {
				errs <- fmt.Errorf("heartbeat: %d results for %d beats", len(res), n)
				return
			}
			for i, r := range res {
				if before[beats[i].TaskID] && !r.Lost {
					errs <- fmt.Errorf("round %d: beat of %s, settled before the beat, not reported lost", round, beats[i].TaskID)
					return
				}
			}
			select {
			case <-done:
				if round > 0 {
					return
				}
			default:
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	now := b.clock.Now()
	res, err := b.store.Heartbeat(b.ctx, beats, now, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if !r.Lost {
			t.Errorf("beat of %s after every settlement: not lost", beats[i].TaskID)
		}
	}
	for _, task := range tasks[:5] {
		got := b.get(task.ID)
		eq(t, "state", got.State, backstop.StateSucceeded)
		eq(t, "executions", outcomes(got), []backstop.Outcome{backstop.OutcomeSucceeded})
		eq(t, "lease cleared", got.LeaseExpiresAt == nil, true)
	}
}
