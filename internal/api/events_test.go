package api_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/testwait"
)

func TestEventsAPI(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(t *testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{})
		// The log begins with the setup's token creations; this test's
		// events come behind them.
		tokens := b.setupTokens(t)
		start := tokens[len(tokens)-1].Cursor
		for _, id := range []string{"a", "b"} {
			if code, out := b.raw(t, api.RoleOperator, "POST", "/v1/tasks", "application/json",
				`{"id":"`+id+`","queue":"q-`+id+`","kind":"k","attributes":{"run_id":"r1"}}`); code != http.StatusCreated && code != http.StatusOK {
				t.Fatalf("enqueue %s: %d %s", id, code, out)
			}
		}
		if code, out := b.raw(t, api.RoleOperator, "POST", "/v1/tasks/b/cancel", "", ""); code != http.StatusOK {
			t.Fatalf("cancel: %d %s", code, out)
		}

		var page backstop.EventPage
		read := func(query string) {
			t.Helper()
			code, out := b.raw(t, api.RoleViewer, "GET", "/v1/events"+query, "", "")
			if code != http.StatusOK {
				t.Fatalf("GET /v1/events%s: %d %s", query, code, out)
			}
			page = backstop.EventPage{}
			if err := json.Unmarshal(out, &page); err != nil {
				t.Fatal(err)
			}
		}
		// The events are final once every transaction before them ended;
		// on Postgres that may take a moment after the calls returned.
		testwait.For(t, "three events", func() bool { read("?after=" + start); return len(page.Events) == 3 })
		if page.Events[0].Actor != "test-operator" || page.Events[2].Type != "task.canceled" || page.Events[2].Actor != "test-operator" {
			t.Fatalf("events: %+v", page.Events)
		}
		read("?stream=queue.q-b&limit=1")
		if len(page.Events) != 1 || page.Events[0].Subject != "b" || page.Events[0].Type != "task.enqueued" {
			t.Fatalf("queue stream: %+v", page)
		}
		// The shape of every list: {items, next_cursor}.
		if _, out := b.raw(t, api.RoleViewer, "GET", "/v1/events?stream=queue.q-b&limit=1", "", ""); true {
			var shape map[string]json.RawMessage
			if err := json.Unmarshal(out, &shape); err != nil {
				t.Fatal(err)
			}
			if len(shape) != 2 || shape["items"] == nil || string(shape["next_cursor"]) != `"`+page.Next+`"` {
				t.Fatalf("GET /v1/events answers %s, want {items, next_cursor}", out)
			}
		}
		read("?stream=queue.q-b&after=" + page.Next)
		if len(page.Events) != 1 || page.Events[0].Type != "task.canceled" {
			t.Fatalf("queue stream, second page: %+v", page)
		}
		for _, q := range []string{"?stream=nope", "?after=zz", "?limit=0", "?limit=5000", "?stream=task."} {
			if code, out := b.raw(t, api.RoleViewer, "GET", "/v1/events"+q, "", ""); code != http.StatusBadRequest {
				t.Fatalf("GET /v1/events%s: %d %s, want 400", q, code, out)
			}
		}
		if code, _ := b.raw(t, api.RoleNone, "GET", "/v1/events", "", ""); code != http.StatusUnauthorized {
			t.Fatalf("anonymous read: %d", code)
		}

		// Server-Sent Events: from the beginning (the setup's token
		// creations, then this test's events), then resumed after the
		// first of this test's events with Last-Event-ID.
		sse := func(path, lastID string, n int) []backstop.Event {
			t.Helper()
			req, _ := http.NewRequest("GET", b.ts.URL+path, nil)
			req.Header.Set("Authorization", "Bearer "+b.secret[api.RoleViewer])
			req.Header.Set("Accept", "text/event-stream")
			if lastID != "" {
				req.Header.Set("Last-Event-ID", lastID)
			}
			resp, err := b.ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			var (
				out []backstop.Event
				id  string
			)
			sc := bufio.NewScanner(resp.Body)
			for len(out) < n && sc.Scan() {
				line := sc.Text()
				switch {
				case strings.HasPrefix(line, "id: "):
					id = strings.TrimPrefix(line, "id: ")
				case strings.HasPrefix(line, "data: "):
					var e backstop.Event
					if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &e); err != nil {
						t.Fatal(err)
					}
					if e.Cursor != id {
						t.Fatalf("sse id %q, event cursor %q", id, e.Cursor)
					}
					out = append(out, e)
				}
			}
			return out
		}
		got := sse("/v1/events/stream", "", 6)
		if len(got) != 6 {
			t.Fatalf("sse: %+v", got)
		}
		for i, tok := range tokens {
			if got[i].Type != "token.created" || got[i].Cursor != tok.Cursor {
				t.Fatalf("sse event %d: %+v, want the setup's %+v", i, got[i], tok)
			}
		}
		got = got[3:]
		if got[0].Subject != "a" {
			t.Fatalf("sse: %+v", got)
		}
		resumed := sse("/v1/events", got[0].Cursor, 2)
		if len(resumed) != 2 || resumed[0].Cursor != got[1].Cursor || resumed[1].Cursor != got[2].Cursor {
			t.Fatalf("resumed: %+v, want %+v", resumed, got[1:])
		}
		// Live: an event written while the stream is open arrives.
		done := make(chan []backstop.Event, 1)
		go func() { done <- sse("/v1/events/stream?stream=type.task.enqueued&after="+got[2].Cursor, "", 1) }()
		if code, out := b.raw(t, api.RoleOperator, "POST", "/v1/tasks", "application/json", `{"id":"c","queue":"q","kind":"k"}`); code >= 300 {
			t.Fatalf("enqueue c: %d %s", code, out)
		}
		if live := <-done; len(live) != 1 || live[0].Subject != "c" {
			t.Fatalf("live: %+v", live)
		}
	})
}

// after=end reads from the end of the log: nothing of its history, a real
// cursor to go on from, then only what was written after; on a filtered
// stream and live (Server-Sent Events) too.
func TestEventsFromEnd(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(t *testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{})
		enqueue := func(id string) {
			t.Helper()
			if code, out := b.raw(t, api.RoleOperator, "POST", "/v1/tasks", "application/json",
				`{"id":"`+id+`","queue":"q","kind":"k"}`); code != http.StatusCreated {
				t.Fatalf("enqueue %s: %d %s", id, code, out)
			}
		}
		read := func(query string) backstop.EventPage {
			t.Helper()
			code, out := b.raw(t, api.RoleViewer, "GET", "/v1/events"+query, "", "")
			if code != http.StatusOK {
				t.Fatalf("GET /v1/events%s: %d %s", query, code, out)
			}
			var page backstop.EventPage
			if err := json.Unmarshal(out, &page); err != nil {
				t.Fatal(err)
			}
			return page
		}
		// The log holds the setup's token creations only: its end is
		// behind them, and nothing is read from it.
		tokens := b.setupTokens(t)
		start := tokens[len(tokens)-1].Cursor
		testwait.For(t, "the end behind the setup's tokens", func() bool {
			p := read("?after=end")
			return len(p.Events) == 0 && p.Next != "" && len(read("?after="+p.Next).Events) == 0
		})
		for _, id := range []string{"a", "b", "c"} {
			enqueue(id)
		}
		testwait.For(t, "three final events", func() bool { return len(read("?after="+start).Events) == 3 })
		var end backstop.EventPage
		testwait.For(t, "the end past c", func() bool {
			end = read("?after=end")
			return len(end.Events) == 0 && end.Next != "" && len(read("?after="+end.Next).Events) == 0
		})
		if q := read("?stream=queue.q&after=end"); len(q.Events) != 0 || q.Next == "" {
			t.Fatalf("queue stream from the end: %+v", q)
		}
		enqueue("d")
		var after backstop.EventPage
		testwait.For(t, "d after the end", func() bool { after = read("?after=" + end.Next); return len(after.Events) > 0 })
		if len(after.Events) != 1 || after.Events[0].Subject != "d" {
			t.Fatalf("after the end: %+v, want d's event only", after.Events)
		}
		if q := read("?stream=queue.q&after=" + end.Next); len(q.Events) != 1 || q.Events[0].Subject != "d" {
			t.Fatalf("queue stream after the end: %+v", q.Events)
		}
		for _, q := range []string{"?after=END", "?after=end1", "?after=-end"} {
			if code, out := b.raw(t, api.RoleViewer, "GET", "/v1/events"+q, "", ""); code != http.StatusBadRequest || !strings.Contains(string(out), "end") {
				t.Fatalf("GET /v1/events%s: %d %s, want 400", q, code, out)
			}
		}

		// Live from the end: the first event the stream sends is e's,
		// written after it opened (a..d stay out).
		req, _ := http.NewRequest("GET", b.ts.URL+"/v1/events/stream?after=end", nil)
		req.Header.Set("Authorization", "Bearer "+b.secret[api.RoleViewer])
		resp, err := b.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream: %d", resp.StatusCode)
		}
		enqueue("e")
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var e backstop.Event
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatal(err)
			}
			if e.Subject != "e" {
				t.Fatalf("live from the end sent %s's %s first, want e's", e.Subject, e.Type)
			}
			return
		}
		t.Fatalf("stream ended: %v", sc.Err())
	})
}
