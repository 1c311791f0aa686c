// Package audit answers "who did what, when, to what and why": the
// operators' actions, read from the event log's audit stream
// (docs/events.md, "The audit stream") and filtered by actor, action type,
// time range and target. The HTTP API (GET /v1/audit), the CLI (`backstop
// audit list`) and the console's Audit page all go through List. It keeps
// no table of its own and never writes.
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Query selects audit entries. Zero fields do not filter.
type Query struct {
	// Actor: exactly this actor (a token's name, cli:<user>, library …).
	Actor string
	// Types: any of these action types (store.AuditTypes).
	Types []string
	// Since and Until bound the action's time: Since <= time < Until.
	Since, Until time.Time
	// Target: exactly this target (a task, queue, token, workflow or run).
	Target string
	// After is the cursor to read behind ("" from the start of the log).
	After string
	// Limit: default 100, at most 1000.
	Limit int
}

// Entry is one operator action: its event (the envelope of
// docs/events.md) with the target and the reason pulled out.
type Entry struct {
	backstop.Event
	Target string `json:"target"`
	Reason string `json:"reason,omitempty"`
}

// Page is one answer: entries in log order, the cursor to read on behind,
// and whether the read reached the end of the log (false: a read budget ran
// out first; read on from NextCursor).
type Page struct {
	Items      []Entry `json:"items"`
	NextCursor string  `json:"next_cursor"`
	Complete   bool    `json:"complete"`
}

// Reader reads the event log (a *backstop.Client).
type Reader interface {
	ReadEvents(ctx context.Context, p backstop.ReadEventsParams) (backstop.EventPage, error)
}

// MaxReads bounds the log reads of one List (each examines at most
// store.EventScanWindow log entries), so one call's cost is bounded
// whatever the log's length; Page.Complete says whether it got to the end.
const MaxReads = 40

// MaxLimit bounds Query.Limit.
const MaxLimit = store.MaxEventLimit

// List reads the audit stream behind q.After and answers the entries
// matching q, up to q.Limit.
func List(ctx context.Context, r Reader, q Query) (Page, error) {
	if err := q.check(); err != nil {
		return Page{}, err
	}
	limit := q.Limit
	if limit == 0 {
		limit = 100
	}
	out := Page{Items: []Entry{}, NextCursor: q.After}
	cursor := q.After
	for range MaxReads {
		p, err := r.ReadEvents(ctx, backstop.ReadEventsParams{Stream: string(store.StreamAudit), After: cursor, Limit: store.MaxEventLimit})
		if err != nil {
			return out, err
		}
		for _, e := range p.Events {
			en := entry(e)
			if !q.matches(en) {
				continue
			}
			out.Items = append(out.Items, en)
			if len(out.Items) == limit {
				out.NextCursor = e.Cursor
				return out, nil
			}
		}
		if p.Next == cursor && len(p.Events) == 0 {
			out.NextCursor, out.Complete = cursor, true
			return out, nil
		}
		cursor = p.Next
		out.NextCursor = cursor
	}
	return out, nil
}

func entry(e backstop.Event) Entry {
	var b struct {
		Target any `json:"target"`
		Reason any `json:"reason"`
	}
	_ = json.Unmarshal(e.Body, &b)
	en := Entry{Event: e, Target: e.Subject}
	if s, ok := b.Target.(string); ok && en.Target == "" {
		en.Target = s
	}
	if en.Target == "" {
		// An action on the deployment itself (lease_key.rotated): its
		// target is its family.
		en.Target, _, _ = strings.Cut(e.Type, ".")
	}
	if s, ok := b.Reason.(string); ok {
		en.Reason = s
	}
	return en
}

func (q Query) matches(e Entry) bool {
	switch {
	case q.Actor != "" && e.Actor != q.Actor:
		return false
	case len(q.Types) > 0 && !slices.Contains(q.Types, e.Type):
		return false
	case q.Target != "" && e.Target != q.Target:
		return false
	case !q.Since.IsZero() && e.Time.Before(q.Since):
		return false
	case !q.Until.IsZero() && !e.Time.Before(q.Until):
		return false
	}
	return true
}

// check refuses a query no parse could have built (a library caller's).
func (q Query) check() error {
	for _, t := range q.Types {
		if !store.IsAuditType(t) {
			return bad("type", "%q is not an audited action; want one of %s", t, strings.Join(store.AuditTypes, ", "))
		}
	}
	if q.Limit < 0 || q.Limit > MaxLimit {
		return bad("limit", "must be 1-%d", MaxLimit)
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
		return bad("until", "must be after since")
	}
	if q.After != "" {
		if _, err := store.ParseCursor(q.After); err != nil {
			return bad("after", "%v", err)
		}
	}
	for f, v := range map[string]string{"actor": q.Actor, "target": q.Target} {
		if err := text(f, v); err != nil {
			return err
		}
	}
	return nil
}

func bad(field, format string, args ...any) error {
	return &backstop.ValidationError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// maxText bounds an actor or target filter.
const maxText = 1024

func text(field, v string) error {
	if len(v) > maxText {
		return bad(field, "is %d bytes; at most %d", len(v), maxText)
	}
	if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
		return bad(field, "must be UTF-8 text without NUL")
	}
	return nil
}

// Params are a query's inputs as text, as the API's query string and the
// CLI's flags give them: actor, type (comma-separated), since and until (an
// RFC 3339 time, or an age counted back from now: 90m, 24h, 7d, 1d12h),
// target, after, limit.
type Params struct {
	Actor, Type, Since, Until, Target, After, Limit string
}

// Parse checks p and builds its Query; a bad input is a
// *backstop.ValidationError naming it (HTTP 400, exit 2).
func Parse(p Params, now time.Time) (Query, error) {
	q := Query{Actor: p.Actor, Target: p.Target, After: p.After}
	if p.Type != "" {
		for t := range strings.SplitSeq(p.Type, ",") {
			t = strings.TrimSpace(t)
			if t == "" {
				return q, bad("type", "an empty type in %q", p.Type)
			}
			if !slices.Contains(q.Types, t) {
				q.Types = append(q.Types, t)
			}
		}
	}
	var err error
	if q.Since, err = when("since", p.Since, now); err != nil {
		return q, err
	}
	if q.Until, err = when("until", p.Until, now); err != nil {
		return q, err
	}
	if p.Limit != "" {
		n, err := strconv.Atoi(p.Limit)
		if err != nil || n < 1 || n > MaxLimit {
			return q, bad("limit", "must be an integer between 1 and %d", MaxLimit)
		}
		q.Limit = n
	}
	return q, q.check()
}

var errAge = errors.New("bad age")

// when reads a time bound: RFC 3339, or an age back from now.
func when(field, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	d, err := bt.ParseAge(s)
	if err != nil {
		return time.Time{}, bad(field, "%q is neither an RFC 3339 time nor an age (90m, 24h, 7d, 1d12h)", s)
	}
	return now.Add(-d).UTC(), nil
}
