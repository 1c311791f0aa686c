package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// A bulk write that selects nothing acts on every open dead letter, so it
// must say so: POST /v1/dlq/redrive and POST /v1/dlq/close without a
// selection and without "all": true are 400 naming all, with nothing
// changed; "all" beside a selection is refused too; with "all": true they
// act on every open dead letter. A redrive's dry run needs no all.
func TestDLQBulkNeedsAll(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		a := kill(t, b, apiclient.Task{Queue: "all-a", Kind: "k", Payload: json.RawMessage(`{}`)})
		c := kill(t, b, apiclient.Task{Queue: "all-b", Kind: "k", Payload: json.RawMessage(`{}`)})
		open := func(what string) {
			t.Helper()
			for _, id := range []string{a, c} {
				if tk, _ := b.lib.Get(t.Context(), id); tk.DLQStatus != bt.DLQOpen {
					t.Fatalf("%s: %s is %s, want open", what, id, tk.DLQStatus)
				}
			}
		}
		for _, req := range []struct{ path, body string }{
			{"/v1/dlq/redrive", `{}`},
			{"/v1/dlq/redrive", ``},
			{"/v1/dlq/redrive", `{"rate":5,"limit":10}`},
			{"/v1/dlq/redrive", `{"all":false}`},
			{"/v1/dlq/redrive", `{"all":true,"queue":"all-a"}`},
			{"/v1/dlq/close", `{"status":"resolved"}`},
			{"/v1/dlq/close", `{"status":"discarded","why":"x","limit":10}`},
			{"/v1/dlq/close", `{"status":"resolved","all":true,"kind":"k"}`},
		} {
			st, body := b.raw(t, api.RoleAdmin, "POST", req.path, "application/json", req.body)
			var p api.Problem
			if st != http.StatusBadRequest || json.Unmarshal(body, &p) != nil || p.Field != "all" || !strings.Contains(p.Detail, `"all": true`) {
				t.Errorf("%s %s: %d %s, want 400 naming \"all\": true", req.path, req.body, st, body)
			}
			open(req.path + " " + req.body)
		}
		// The dry run previews everything without all.
		st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/redrive", "application/json", `{"dry_run":true}`)
		if st != http.StatusOK || !strings.Contains(string(body), `"matched":2`) {
			t.Fatalf("dry run: %d %s", st, body)
		}
		open("dry run")

		// "all": true acts on every open dead letter.
		st, body = b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/close", "application/json", `{"status":"resolved","note":"handled","all":true,"limit":1}`)
		if st != http.StatusOK || !strings.Contains(string(body), `"closed":1`) {
			t.Fatalf("close all: %d %s", st, body)
		}
		st, body = b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/redrive", "application/json", `{"all":true,"wait":"10s"}`)
		if st != http.StatusOK || !strings.Contains(string(body), `"replayed":1`) {
			t.Fatalf("redrive all: %d %s", st, body)
		}
		resolved, replayed := 0, 0
		for _, id := range []string{a, c} {
			tk, _ := b.lib.Get(t.Context(), id)
			switch {
			case tk.DLQStatus == bt.DLQResolved:
				resolved++
			case tk.State != bt.StateDead:
				replayed++
			}
		}
		if resolved != 1 || replayed != 1 {
			t.Fatalf("after close all and redrive all: %d resolved, %d replayed; want 1 and 1", resolved, replayed)
		}
	})
}
