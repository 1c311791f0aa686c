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
func (s *Store) Wakeups(ctx context.Context) <-chan string {
	ch := make(chan string, wakeupBuffer)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		close(ch)
		return ch
	}
	s.wg.Add(1)
	s.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(s.done, cancel)
	conn, _ := s.listen(ctx) // on failure the loop retries
	go func() {
		defer s.wg.Done()
		defer close(ch)
		defer stopOnClose()
		defer cancel()
		s.forwardWakeups(ctx, conn, ch)
	}()
	return ch
}

// forwardWakeups relays notifications to ch until ctx ends, reconnecting
// whenever the connection fails.
func (s *Store) forwardWakeups(ctx context.Context, conn *pgx.Conn, ch chan<- string) {
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
