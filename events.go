package backstop

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/backstophq/backstop/store"
)

// The event log (docs/events.md): every state change of a task appends an
// event in the same transaction as the change; readers follow streams of
// the log by cursor.

// WithActor returns a context that names who acts: the events of enqueues
// and cancels made with it record the actor ("library" when none is named;
// the CLI names "cli:<user>", the HTTP API the token's name).
func WithActor(ctx context.Context, actor string) context.Context {
	return store.WithActor(ctx, actor)
}

// ActorFrom returns the actor WithActor put in ctx, or "library".
func ActorFrom(ctx context.Context) string {
	return store.ActorFrom(ctx, store.DefaultActor)
}

// EventPage is one read of a stream: events in cursor order and the cursor
// to read after next.
type EventPage = store.EventPage

// ReadEventsParams selects events.
type ReadEventsParams struct {
	// Stream: all (default), type.<type>, task.<id>, queue.<name>,
	// run.<run_id>, worker.<id>, execution.<id>, node.<host>
	// (docs/events.md).
	Stream string
	// After is a cursor (an event's Cursor, or a page's Next); "" reads
	// from the beginning of the log, EventsEnd ("end") from its end: only
	// events that were not final yet when the read began.
	After string
	// Limit: default 100, at most 1000.
	Limit int
}

// EventsEnd is the After that starts a read or subscription at the end of
// the log (from now) instead of its beginning: the store finds the end in
// one indexed read, so a follower that wants only new events never reads
// the log's history.
const EventsEnd = "end"

// ReadEvents reads a stream after a cursor. Only events whose transaction
// and every earlier one in cursor order have ended are served, so a reader
// that continues from Next never skips an event. Bad input wraps
// ErrInvalid.
func (c *Client) ReadEvents(ctx context.Context, p ReadEventsParams) (EventPage, error) {
	q, err := c.eventQuery(ctx, p)
	if err != nil {
		return EventPage{}, err
	}
	page, err := c.store.ReadEvents(ctx, q)
	if errors.Is(err, store.ErrBadCursor) {
		return page, invalid("after", "%v", err)
	}
	return page, err
}

// eventQuery checks p and resolves EventsEnd to the log's end cursor.
func (c *Client) eventQuery(ctx context.Context, p ReadEventsParams) (store.EventQuery, error) {
	st, err := store.ParseStream(p.Stream)
	if err != nil {
		return store.EventQuery{}, invalid("stream", "%v", err)
	}
	if p.After != EventsEnd {
		if _, err := store.ParseCursor(p.After); err != nil {
			return store.EventQuery{}, invalid("after", "%v (or %q: from the end of the log)", err, EventsEnd)
		}
	}
	if p.Limit < 0 || p.Limit > store.MaxEventLimit {
		return store.EventQuery{}, invalid("limit", "must be 0-%d", store.MaxEventLimit)
	}
	after := p.After
	if after == EventsEnd {
		if after, err = c.store.EventsEnd(ctx); err != nil {
			return store.EventQuery{}, err
		}
	}
	return store.EventQuery{Stream: st, After: after, Limit: p.Limit}, nil
}

// SubscribeParams configures a subscription.
type SubscribeParams struct {
	ReadEventsParams
	// Name makes the subscription durable: it starts after the position
	// last acknowledged under this name (After is used only when there is
	// none), and Ack stores positions under it.
	Name string
	// PollInterval is how often a caught-up subscription looks for new
	// events. Default: 200ms.
	PollInterval time.Duration
	// Buffer is the channel's capacity. Default: 100.
	Buffer int
}

// Subscription delivers a stream's events, from a cursor and then live, on
// C, in cursor order. Delivery is at-least-once: after a restart a durable
// subscription resumes after its last Ack, so events delivered but not
// acknowledged come again. A read that fails for a reason that may pass
// (the database restarting, a dropped connection) is retried with backoff
// (100ms doubling to 5s, logged as a warning) from the last delivered
// event: nothing is skipped or delivered twice. Other errors end it (Err).
type Subscription struct {
	C <-chan Event

	c      *Client
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// Subscribe starts a subscription; it runs until ctx ends or Close.
func (c *Client) Subscribe(ctx context.Context, p SubscribeParams) (*Subscription, error) {
	if len(p.Name) > 200 {
		return nil, invalid("name", "at most 200 bytes")
	}
	if p.Name != "" {
		saved, err := c.store.EventCheckpoint(ctx, p.Name)
		if err != nil {
			return nil, err
		}
		if saved != "" {
			p.After = saved
		}
	}
	q, err := c.eventQuery(ctx, p.ReadEventsParams)
	if err != nil {
		return nil, err
	}
	if q.Limit == 0 {
		q.Limit = 500
	}
	if p.PollInterval <= 0 {
		p.PollInterval = 200 * time.Millisecond
	}
	if p.Buffer <= 0 {
		p.Buffer = 100
	}
	ch := make(chan Event, p.Buffer)
	ctx, cancel := context.WithCancel(ctx)
	s := &Subscription{C: ch, c: c, name: p.Name, cancel: cancel, done: make(chan struct{})}
	go s.run(ctx, q, ch, p.PollInterval)
	return s, nil
}

func (s *Subscription) run(ctx context.Context, q store.EventQuery, ch chan<- Event, poll time.Duration) {
	defer close(s.done)
	defer close(ch)
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	backoff := minReadBackoff
	for {
		page, err := s.c.store.ReadEvents(ctx, q)
		if err != nil {
			if !readRetryable(ctx, err) {
				if ctx.Err() == nil {
					s.err = err
				}
				return
			}
			// The database went away (a restart, a failover, the
			// network): try again from the last delivered cursor.
			s.c.cfg.Logger.Warn("event subscription: reading failed; retrying", "stream", q.Stream.String(),
				"after", q.After, "error", err.Error(), "backoff", backoff.String())
			timer.Reset(backoff)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return
			}
			backoff = min(2*backoff, maxReadBackoff)
			continue
		}
		backoff = minReadBackoff
		for _, e := range page.Events {
			select {
			case ch <- e:
			case <-ctx.Done():
				return
			}
		}
		q.After = page.Next
		if len(page.Events) == q.Limit {
			continue // more is waiting
		}
		timer.Reset(poll)
		select {
		case <-timer.C:
		case <-ctx.Done():
			return
		}
	}
}

// The backoff of a follower whose reads fail (Subscription, the CLI's
// events tail --follow, the API's event stream).
const (
	minReadBackoff = 100 * time.Millisecond
	maxReadBackoff = 5 * time.Second
)

// readRetryable says whether a failed read of the log is worth trying
// again, from the same cursor: anything but bad input, an error the
// database says retrying cannot help (ClassifyPostgresError: permissions,
// syntax, data), or the end of ctx. Connection errors are retried:
// "terminating connection due to administrator command", "unexpected
// EOF", refused connections while a server restarts.
func readRetryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, ErrInvalid) ||
		errors.Is(err, store.ErrBadCursor) || errors.Is(err, store.ErrBadStream) {
		return false
	}
	return !IsPermanent(ClassifyPostgresError(err))
}

// ReadRetryable is readRetryable for followers outside the library (the
// CLI, the HTTP API's event stream).
func ReadRetryable(ctx context.Context, err error) bool { return readRetryable(ctx, err) }

// ReadBackoff is the wait before the nth (from 0) retry of a failed read.
func ReadBackoff(n int) time.Duration {
	d := minReadBackoff
	for range min(n, 10) {
		d = min(2*d, maxReadBackoff)
	}
	return d
}

// Ack stores cursor (an event's Cursor) as the durable subscription's
// position: a restart resumes after it.
func (s *Subscription) Ack(ctx context.Context, cursor string) error {
	if s.name == "" {
		return fmt.Errorf("backstop: Ack on a subscription without a Name: %w", ErrInvalid)
	}
	if _, err := store.ParseCursor(cursor); err != nil {
		return invalid("cursor", "%v", err)
	}
	return s.c.store.SaveEventCheckpoint(ctx, s.name, cursor, s.c.now())
}

// Close stops the subscription and waits for it; C is closed.
func (s *Subscription) Close() {
	s.cancel()
	<-s.done
}

// Err is why the subscription stopped, once C is closed (nil when it was
// closed or its context ended).
func (s *Subscription) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}
