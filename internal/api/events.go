package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/backstophq/backstop"
)

// The event log over HTTP (docs/events.md): GET /v1/events reads a stream
// after a cursor, a page at a time; with Accept: text/event-stream, or at
// GET /v1/events/stream, it follows the stream live as Server-Sent Events
// whose id is the event's cursor, so a reconnecting client resumes with
// Last-Event-ID. A read that fails while streaming for a reason that may
// pass (the database restarting) is retried with backoff, the stream kept
// open (keep-alive comments go on) and resumed after the last event sent.

// EventPage is GET /v1/events.
type EventPage = backstop.EventPage

// actorContext names the calling token as the actor of the events its
// enqueues and cancels write.
func actorContext(r *http.Request) context.Context {
	return backstop.WithActor(r.Context(), principalFrom(r.Context()).Name)
}

// sseKeepAlive is how often an idle stream sends a comment, so proxies
// keep the connection; ssePoll how often it looks for new events.
var (
	sseKeepAlive = 15 * time.Second
	ssePoll      = 200 * time.Millisecond
)

func parseEventQuery(r *http.Request) (backstop.ReadEventsParams, error) {
	q := r.URL.Query()
	p := backstop.ReadEventsParams{Stream: q.Get("stream"), After: q.Get("after")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return p, invalidParam("limit", "must be an integer between 1 and 1000")
		}
		p.Limit = n
	}
	return p, nil
}

func invalidParam(field, msg string) error {
	return &backstop.ValidationError{Field: field, Message: msg}
}

// GET /v1/events
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) error {
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		return s.streamEvents(w, r)
	}
	p, err := parseEventQuery(r)
	if err != nil {
		return err
	}
	page, err := s.c.ReadEvents(r.Context(), p)
	if err != nil {
		return err
	}
	page.Events = maskEvents(principalFrom(r.Context()), page.Events)
	return writeJSON(w, http.StatusOK, page)
}

// GET /v1/events/stream (and GET /v1/events with Accept: text/event-stream)
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request) error {
	p, err := parseEventQuery(r)
	if err != nil {
		return err
	}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		p.After = id
	}
	ctx := r.Context()
	// Validate before the 200: a bad stream or cursor is a problem document.
	page, err := s.c.ReadEvents(ctx, p)
	if err != nil {
		return err
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // a stream outlives the server's write timeout
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return nil
	}
	lastSent := time.Now()
	// keepAlive writes a comment when nothing was sent for a while (proxies
	// close idle streams); false: the client is gone.
	keepAlive := func() bool {
		if time.Since(lastSent) <= sseKeepAlive {
			return true
		}
		if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
			return false
		}
		if err := rc.Flush(); err != nil {
			return false
		}
		lastSent = time.Now()
		return true
	}
	// pause waits d; false: the client left or the server stops.
	pause := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-s.quit:
			return false
		case <-time.After(d):
			return true
		}
	}
	who := principalFrom(ctx)
	for {
		for _, e := range maskEvents(who, page.Events) {
			data, err := json.Marshal(e)
			if err != nil {
				return nil
			}
			if _, err := fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", e.Cursor, e.Type, data); err != nil {
				return nil
			}
		}
		if len(page.Events) == 0 && page.Next != p.After {
			// A filtered stream moved past events it does not show: an
			// id-only message moves the client's Last-Event-ID along.
			if _, err := fmt.Fprintf(w, "id: %s\n\n", page.Next); err != nil {
				return nil
			}
		}
		if len(page.Events) > 0 || page.Next != p.After {
			if err := rc.Flush(); err != nil {
				return nil
			}
			lastSent = time.Now()
		}
		p.After = page.Next
		if len(page.Events) < max(p.Limit, 100) && !pause(ssePoll) {
			return nil
		}
		if !keepAlive() {
			return nil
		}
		for failures := 0; ; failures++ {
			if page, err = s.c.ReadEvents(ctx, p); err == nil {
				break
			}
			if !backstop.ReadRetryable(ctx, err) {
				return nil // the response has started: the client reconnects with Last-Event-ID
			}
			// The database went away (a restart, the network): keep the
			// stream, and read again after the last event sent.
			wait := backstop.ReadBackoff(failures)
			if failures%10 == 0 { // the first failure, then one in ten
				s.log.Warn("event stream: reading failed; retrying", "stream", p.Stream, "after", p.After, "error", err.Error(),
					"backoff", wait.String())
			}
			if !pause(wait) || !keepAlive() {
				return nil
			}
		}
	}
}
