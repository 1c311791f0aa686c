package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// GET /v1/counts counts tasks by state and dead letters by status, every
// state and status present, for one queue or all; GET /v1/tasks and
// /v1/dlq list newest first with order=newest and page on toward older
// ids. Bad parameters are 400s naming them.
func TestCountsAndOrder(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		viewer, op := b.as[api.RoleViewer], b.as[api.RoleOperator]
		var pending []string
		for range 3 {
			r, err := op.Enqueue(ctx, apiclient.Task{Queue: "a", Kind: "k"})
			if err != nil {
				t.Fatal(err)
			}
			pending = append(pending, r.Task.ID)
		}
		dead := []string{kill(t, b, apiclient.Task{Queue: "d", Kind: "k"}), kill(t, b, apiclient.Task{Queue: "d", Kind: "k"})}

		counts := func(q string) api.CountsResponse {
			t.Helper()
			st, body := b.raw(t, api.RoleViewer, "GET", "/v1/counts"+q, "", "")
			if st != http.StatusOK {
				t.Fatalf("counts%s: %d %s", q, st, body)
			}
			var c api.CountsResponse
			if err := json.Unmarshal(body, &c); err != nil {
				t.Fatal(err)
			}
			return c
		}
		all := counts("")
		// Exact counts say nothing of a cap (tasks_capped: the states
		// counted among the newest tasks only).
		if _, body := b.raw(t, api.RoleViewer, "GET", "/v1/counts", "", ""); strings.Contains(string(body), "capped") {
			t.Fatalf("counts below the cap: %s", body)
		}
		if _, body := b.raw(t, api.RoleViewer, "GET", "/v1/queues", "", ""); strings.Contains(string(body), "capped") {
			t.Fatalf("queues below the cap: %s", body)
		}
		if all.Tasks["pending"] != 3 || all.Tasks["dead"] != 2 || all.Tasks["succeeded"] != 0 || all.TasksTotal != 5 {
			t.Fatalf("all: %+v", all)
		}
		if _, ok := all.Tasks["canceled"]; !ok || len(all.Tasks) != 7 || len(all.DeadLetters) != 4 {
			t.Fatalf("every state and status is listed: %+v", all)
		}
		if all.DeadLetters["open"] != 2 || all.DeadLetters["resolved"] != 0 {
			t.Fatalf("dead letters: %+v", all.DeadLetters)
		}
		if c := counts("?queue=a"); c.Queue != "a" || c.Tasks["pending"] != 3 || c.Tasks["dead"] != 0 || c.DeadLetters["open"] != 0 {
			t.Fatalf("queue a: %+v", c)
		}
		if c := counts("?queue=d"); c.Tasks["dead"] != 2 || c.DeadLetters["open"] != 2 || c.TasksTotal != 2 {
			t.Fatalf("queue d: %+v", c)
		}
		if c := counts("?queue=nothing-here"); c.TasksTotal != 0 {
			t.Fatalf("an empty queue: %+v", c)
		}
		for _, q := range []string{"?state=pending", "?queue=a&queue=b"} {
			if st, body := b.raw(t, api.RoleViewer, "GET", "/v1/counts"+q, "", ""); st != http.StatusBadRequest {
				t.Fatalf("counts%s: %d %s, want 400", q, st, body)
			}
		}
		if st, _ := b.raw(t, api.RoleNone, "GET", "/v1/counts", "", ""); st != http.StatusUnauthorized {
			t.Fatalf("counts without a token: %d", st)
		}

		// Newest first, paged by the cursor.
		list := func(q url.Values) ([]string, string) {
			t.Helper()
			l, err := viewer.List(ctx, q)
			if err != nil {
				t.Fatalf("list %v: %v", q, err)
			}
			var out []string
			for _, it := range l.Items {
				out = append(out, it.ID)
			}
			next := ""
			if l.NextCursor != nil {
				next = *l.NextCursor
			}
			return out, next
		}
		want := slices.Clone(pending)
		slices.Reverse(want)
		first, next := list(url.Values{"queue": {"a"}, "order": {"newest"}, "limit": {"2"}})
		if !slices.Equal(first, want[:2]) || next == "" {
			t.Fatalf("newest first: %v (next %q), want %v", first, next, want[:2])
		}
		rest, _ := list(url.Values{"queue": {"a"}, "order": {"newest"}, "limit": {"2"}, "after": {next}})
		if !slices.Equal(rest, want[2:]) {
			t.Fatalf("the next page: %v, want %v", rest, want[2:])
		}
		if got, _ := list(url.Values{"queue": {"a"}, "order": {"oldest"}}); !slices.Equal(got, pending) {
			t.Fatalf("oldest first: %v, want %v", got, pending)
		}
		// A where evaluated in Go pages the same way.
		if got, _ := list(url.Values{"queue": {"a"}, "order": {"newest"}, "where": {`payload.missing == 1 || true`}}); !slices.Equal(got, want) {
			t.Fatalf("newest first with a where in Go: %v, want %v", got, want)
		}
		st, body := b.raw(t, api.RoleViewer, "GET", "/v1/dlq?order=newest", "", "")
		var dl api.ListResponse
		if st != http.StatusOK || json.Unmarshal(body, &dl) != nil || len(dl.Items) != 2 || dl.Items[0].ID != dead[1] {
			t.Fatalf("dead letters newest first: %d %s", st, body)
		}
		for _, p := range []string{"/v1/tasks?order=latest", "/v1/dlq?order=newest&order=oldest"} {
			if st, body := b.raw(t, api.RoleViewer, "GET", p, "", ""); st != http.StatusBadRequest || !strings.Contains(string(body), "order") {
				t.Fatalf("%s: %d %s, want a 400 naming order", p, st, body)
			}
		}
	})
}

// GET /v1/ordering lists a queue the configuration orders even while it
// holds nothing; a parameter is a 400.
func TestOrderedQueues(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1, lib: &backstop.Config{Queues: map[string]backstop.QueueConfig{
			"ordered": {Ordering: backstop.OrderingConfig{Enabled: true}}, "plain": {}}}})
		st, body := b.raw(t, api.RoleViewer, "GET", "/v1/ordering", "", "")
		var out api.OrderedQueues
		if st != http.StatusOK || json.Unmarshal(body, &out) != nil {
			t.Fatalf("ordering: %d %s", st, body)
		}
		if len(out.Items) != 1 || out.Items[0] != (api.OrderedQueue{Queue: "ordered", Declared: true}) {
			t.Fatalf("ordered queues: %+v", out.Items)
		}
		if st, body := b.raw(t, api.RoleViewer, "GET", "/v1/ordering?queue=x", "", ""); st != http.StatusBadRequest {
			t.Fatalf("a parameter: %d %s", st, body)
		}
	})
}
