package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// wakeupBuffer is how many queue names a Wakeups channel holds before
	// further ones are dropped.
	wakeupBuffer = 64
	// Reconnect backoff of a Wakeups listener that lost its connection.
	listenMinBackoff = 100 * time.Millisecond
	listenMaxBackoff = 5 * time.Second
)

// Wakeups implements store.Store with LISTEN on a dedicated connection (not
// a pooled one, whose session state must stay clean). The first LISTEN is in
// place when Wakeups returns, unless the database could not be reached; the
// listener then retries with backoff. The channel is closed when ctx ends or
// the Store is closed.
//
// This Store's own Enqueue also wakes the channel in-process as soon as it
// commits, before the notification has crossed the server to the
// listener; the notification, when it arrives, is recognised as this
// process's own (by the committing backend's pid) and not delivered again.
func (s *Store) Wakeups(ctx context.Context) <-chan string {
	ch := make(chan string, wakeupBuffer)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		close(ch)
		return ch
	}
	s.wg.Add(1)
	if s.local == nil {
		s.local = make(map[chan string]map[localWake]int)
	}
	s.local[ch] = map[localWake]int{}
	s.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(s.done, cancel)
	conn, _ := s.listen(ctx) // on failure the loop retries
	go func() {
		defer s.wg.Done()
		defer close(ch)
		defer s.unsubscribe(ch) // before the close: wakeLocal sends under mu
		defer stopOnClose()
		defer cancel()
		s.forwardWakeups(ctx, conn, ch)
	}()
	return ch
}

// localWake is a wake-up this Store's Enqueue delivers in-process: the
// backend (pid) that committed it and the queue. Its notification, which
// follows through the listener, is this process's own and is dropped
// there, so that a worker is woken once per commit as before.
type localWake struct {
	pid   uint32
	queue string
}

// expectWakes records, before the commit that sends them, the
// notifications of queues that wakeLocal will deliver; dropWakes forgets
// them when the commit failed.
func (s *Store) expectWakes(pid uint32, queues []string) { s.countWakes(pid, queues, 1) }
func (s *Store) dropWakes(pid uint32, queues []string)   { s.countWakes(pid, queues, -1) }

func (s *Store) countWakes(pid uint32, queues []string, d int) {
	if len(queues) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, own := range s.local {
		for _, q := range queues {
			k := localWake{pid, q}
			if own[k] += d; own[k] <= 0 {
				delete(own, k)
			}
		}
	}
}

// wakeLocal wakes queues on this Store's open Wakeups channels.
func (s *Store) wakeLocal(queues []string) {
	if len(queues) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.local {
		for _, q := range queues {
			select {
			case ch <- q:
			default: // full: the worker is awake anyway
			}
		}
	}
}

// ownWake says whether a notification is one a Wakeups channel already
// got in-process, and forgets it.
func (s *Store) ownWake(ch chan string, pid uint32, queue string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	own := s.local[ch]
	k := localWake{pid, queue}
	if own[k] == 0 {
		return false
	}
	if own[k]--; own[k] == 0 {
		delete(own, k)
	}
	return true
}

// resetWakes forgets the expected notifications of a channel whose
// listener reconnected: those sent while it was away are lost.
func (s *Store) resetWakes(ch chan string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.local[ch]; ok {
		s.local[ch] = map[localWake]int{}
	}
}

func (s *Store) unsubscribe(ch chan string) {
	s.mu.Lock()
	delete(s.local, ch)
	s.mu.Unlock()
}

// forwardWakeups relays notifications to ch until ctx ends, reconnecting
// whenever the connection fails.
func (s *Store) forwardWakeups(ctx context.Context, conn *pgx.Conn, ch chan string) {
	backoff := listenMinBackoff
	var since time.Time
	if conn != nil {
		since = time.Now()
	}
	for {
		if conn == nil {
			if !sleepCtx(ctx, backoff) {
				return
			}
			var err error
			if conn, err = s.listen(ctx); err != nil {
				backoff = min(2*backoff, listenMaxBackoff)
				continue
			}
			since = time.Now()
			s.resetWakes(ch)
			// Notifications sent while we were away are lost: wake everyone.
			select {
			case ch <- "":
			default:
			}
		}
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			closeConn(conn)
			conn = nil
			if ctx.Err() != nil {
				return
			}
			if time.Since(since) > listenMaxBackoff {
				backoff = listenMinBackoff // it was healthy for a while
			} else {
				backoff = min(2*backoff, listenMaxBackoff)
			}
			continue
		}
		if s.ownWake(ch, n.PID, n.Payload) {
			continue
		}
		select {
		case ch <- n.Payload:
		default: // full: the worker is awake anyway
		}
	}
}

// listen opens a connection with the pool's settings and LISTENs on it.
func (s *Store) listen(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+wakeupChannel); err != nil {
		closeConn(conn)
		return nil, err
	}
	return conn, nil
}

func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// sleepCtx waits for d; false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
