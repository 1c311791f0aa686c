package api

import (
	"context"
	"sync"

	"github.com/backstophq/backstop/store"
)

// waker turns the store's one wake-up stream into a broadcast, so any number
// of long-polling claims share one listener (on SQLite, one pinned
// connection; on Postgres, one LISTEN).
type waker struct {
	mu     sync.Mutex
	ch     chan struct{} // closed on the next wake-up
	cancel context.CancelFunc
	done   chan struct{}
}

func newWaker(s store.Store) *waker {
	ctx, cancel := context.WithCancel(context.Background())
	w := &waker{ch: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	ups := s.Wakeups(ctx)
	go func() {
		defer close(w.done)
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-ups:
				if !ok {
					return
				}
				w.broadcast()
			}
		}
	}()
	return w
}

// wait returns a channel closed at the next wake-up. Take it before claiming,
// so work that arrives during the claim is not missed.
func (w *waker) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

func (w *waker) broadcast() {
	w.mu.Lock()
	close(w.ch)
	w.ch = make(chan struct{})
	w.mu.Unlock()
}

func (w *waker) close() {
	w.cancel()
	<-w.done
}
