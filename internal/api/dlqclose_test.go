package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// POST /v1/dlq/close discards (or resolves) the filter's open dead letters
// a batch per call; a second call with the first answer's snapshot takes the
// rest; other queues' stay open; bad input is 400 with nothing closed; the
// admin's only.
func TestCloseDeadLetters(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		var ids []string
		for range 3 {
			ids = append(ids, kill(t, b, apiclient.Task{Queue: "close", Kind: "k", Payload: json.RawMessage(`{}`)}))
		}
		other := kill(t, b, apiclient.Task{Queue: "keep", Kind: "k", Payload: json.RawMessage(`{}`)})
		for _, c := range []struct {
			role   api.Role
			body   string
			status int
		}{
			{api.RoleOperator, `{"queue":"close","status":"discarded","why":"x"}`, http.StatusForbidden},
			{api.RoleAdmin, `{"queue":"close","status":"discarded"}`, http.StatusBadRequest},
			{api.RoleAdmin, `{"queue":"close","status":"replayed","why":"x"}`, http.StatusBadRequest},
			{api.RoleAdmin, `{"queue":"close","status":"discarded","why":"x","limit":5001}`, http.StatusBadRequest},
			{api.RoleAdmin, `{"queue":"close","status":"discarded","why":"x","bogus":1}`, http.StatusBadRequest},
		} {
			if st, body := b.raw(t, c.role, "POST", "/v1/dlq/close", "application/json", c.body); st != c.status {
				t.Errorf("%s %s: %d %s, want %d", c.role, c.body, st, body, c.status)
			}
		}
		if tk, _ := b.lib.Get(t.Context(), ids[0]); tk.DLQStatus != bt.DLQOpen {
			t.Fatalf("a refused call closed %s", ids[0])
		}
		var r1 struct {
			Closed, Skipped int
			More            bool
			Snapshot        time.Time
		}
		st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/close", "application/json", `{"queue":"close","status":"discarded","why":"customer deleted","limit":2}`)
		if st != http.StatusOK || json.Unmarshal(body, &r1) != nil || r1.Closed != 2 || !r1.More {
			t.Fatalf("first batch: %d %s", st, body)
		}
		snap, _ := json.Marshal(r1.Snapshot)
		st, body = b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/close", "application/json",
			`{"queue":"close","status":"discarded","why":"customer deleted","limit":2,"snapshot":`+string(snap)+`}`)
		if st != http.StatusOK || !strings.Contains(string(body), `"closed":1`) || !strings.Contains(string(body), `"more":false`) {
			t.Fatalf("second batch: %d %s", st, body)
		}
		for _, id := range ids {
			tk, err := b.lib.Get(t.Context(), id)
			if err != nil || tk.DLQStatus != bt.DLQDiscarded {
				t.Fatalf("%s: %v %v, want discarded", id, tk, err)
			}
			evs, _ := b.lib.Events(t.Context(), id)
			found := false
			for _, e := range evs {
				found = found || (e.Type == "dlq.discarded" && strings.Contains(string(e.Body), "customer deleted"))
			}
			if !found {
				t.Errorf("%s: no dlq.discarded with the reason", id)
			}
		}
		if tk, _ := b.lib.Get(t.Context(), other); tk.DLQStatus != bt.DLQOpen {
			t.Errorf("another queue's dead letter is %s", tk.DLQStatus)
		}
		// A where on the payload narrows what is closed.
		one := kill(t, b, apiclient.Task{Queue: "w", Kind: "k", Payload: json.RawMessage(`{"n":1}`)})
		two := kill(t, b, apiclient.Task{Queue: "w", Kind: "k", Payload: json.RawMessage(`{"n":2}`)})
		if st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/close", "application/json",
			`{"queue":"w","where":"payload.n == 2","status":"resolved","note":"refunded"}`); st != http.StatusOK || !strings.Contains(string(body), `"closed":1`) {
			t.Fatalf("close where: %d %s", st, body)
		}
		if st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/close", "application/json",
			`{"queue":"w","where":"payload.n ==","status":"resolved","note":"x"}`); st != http.StatusBadRequest || !strings.Contains(string(body), "where") {
			t.Fatalf("bad where: %d %s", st, body)
		}
		for id, want := range map[string]bt.DLQStatus{one: bt.DLQOpen, two: bt.DLQResolved} {
			if tk, _ := b.lib.Get(t.Context(), id); tk.DLQStatus != want {
				t.Errorf("%s is %s, want %s", id, tk.DLQStatus, want)
			}
		}
	})
}
