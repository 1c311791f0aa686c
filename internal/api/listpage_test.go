package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
)

// listPage is one decoded page of a task list, items kept as raw keys.
type listPage struct {
	Items      []map[string]json.RawMessage `json:"items"`
	NextCursor *string                      `json:"next_cursor"`
}

// pageAll follows next_cursor from the first page of path (its query
// without after) to the last, checking each page against the budget, and
// returns every item and how many pages it took.
func pageAll(t *testing.T, b *bundle, path string, budget int) ([]map[string]json.RawMessage, int) {
	t.Helper()
	var (
		all   []map[string]json.RawMessage
		pages int
		after string
	)
	for {
		p := path
		if after != "" {
			p += "&after=" + url.QueryEscape(after)
		}
		st, body := b.raw(t, api.RoleViewer, "GET", p, "", "")
		if st != 200 {
			t.Fatalf("GET %s: %d %s", p, st, body)
		}
		var page listPage
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatalf("GET %s: %v", p, err)
		}
		pages++
		if len(page.Items) == 0 {
			t.Fatalf("GET %s: an empty page (next_cursor %v)", p, page.NextCursor)
		}
		if len(page.Items) > 1 && len(body) > budget {
			t.Fatalf("GET %s: %d items in %d bytes, over the budget of %d", p, len(page.Items), len(body), budget)
		}
		all = append(all, page.Items...)
		if page.NextCursor == nil {
			return all, pages
		}
		var last string
		_ = json.Unmarshal(page.Items[len(page.Items)-1]["id"], &last)
		if *page.NextCursor != last {
			t.Fatalf("GET %s: next_cursor %q, want the last id %q", p, *page.NextCursor, last)
		}
		after = *page.NextCursor
		if pages > 1000 {
			t.Fatal("paging does not end")
		}
	}
}

// TestBoundedLists: the task lists answer summaries (payload_size, no
// payload) unless include=payload asks for payloads; with payloads, each
// page stays within the server's byte budget (one item alone may pass
// it), and paging by next_cursor visits every task exactly once, in id
// order, payloads whole (inline and spilled). show answers the payload.
func TestBoundedLists(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		const budget = 64 << 10
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1, listMaxBytes: budget,
			lib: &backstop.Config{InlinePayloadLimit: 4096}})
		ctx := context.Background()
		payloads := map[string]string{}
		var ids []string
		params := make([]backstop.EnqueueParams, 41)
		for i := range params {
			n := 1000 + i*300
			if i == 20 {
				n = 100 << 10 // larger than the whole budget: a page of its own
			}
			params[i] = backstop.EnqueueParams{Queue: "big", Kind: "k", MaxAttempts: 1,
				Payload:    json.RawMessage(fmt.Sprintf(`{"i":%d,"blob":"%s"}`, i, strings.Repeat("x", n))),
				Attributes: map[string]string{"run_id": "r-big"}}
		}
		rs, err := b.lib.EnqueueMany(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range rs {
			ids = append(ids, r.Task.ID)
			payloads[r.Task.ID] = string(params[i].Payload)
		}
		small := make([]backstop.EnqueueParams, 300)
		for i := range small {
			small[i] = backstop.EnqueueParams{Queue: "small", Kind: "k", Payload: json.RawMessage(`{"n":1}`)}
		}
		if _, err := b.lib.EnqueueMany(ctx, small); err != nil {
			t.Fatal(err)
		}

		check := func(t *testing.T, path string, withPayload bool) {
			t.Helper()
			items, pages := pageAll(t, b, path, budget)
			if len(items) != len(ids) {
				t.Fatalf("%s: %d items, want %d", path, len(items), len(ids))
			}
			for i, it := range items {
				var id string
				var size int
				_ = json.Unmarshal(it["id"], &id)
				_ = json.Unmarshal(it["payload_size"], &size)
				if id != ids[i] {
					t.Fatalf("%s: item %d is %s, want %s (each once, in id order)", path, i, id, ids[i])
				}
				if size != len(payloads[id]) {
					t.Errorf("%s: %s payload_size %d, want %d", path, id, size, len(payloads[id]))
				}
				p, has := it["payload"]
				switch {
				case !withPayload && has:
					t.Fatalf("%s: a summary carries a payload (%d bytes)", path, len(p))
				case withPayload && !jsonEqual(p, payloads[id]):
					t.Fatalf("%s: %s payload %.80s…, want the whole payload", path, id, p)
				}
			}
			if withPayload && pages < 5 {
				t.Errorf("%s: %d pages for %d KiB of payloads under a %d KiB budget", path, pages, 500, budget>>10)
			}
			if !withPayload && pages != 1 {
				t.Errorf("%s: summaries took %d pages, want 1", path, pages)
			}
		}
		for _, path := range []string{"/v1/tasks?queue=big&limit=1000", "/v1/runs/r-big/tasks?limit=1000"} {
			check(t, path, false)
			check(t, path+"&include=payload", true)
			check(t, path+"&include=payload&raw=false", true)
		}
		// Summaries have a budget too: 300 small tasks do not fit 64 KiB.
		if items, pages := pageAll(t, b, "/v1/tasks?queue=small&limit=10000", budget); len(items) != 300 || pages < 2 {
			t.Errorf("small summaries: %d items in %d pages, want 300 in 2 or more", len(items), pages)
		}
		// A limit still ends a page, with a cursor.
		st, body := b.raw(t, api.RoleViewer, "GET", "/v1/tasks?queue=big&limit=3&include=payload", "", "")
		var page listPage
		if err := json.Unmarshal(body, &page); st != 200 || err != nil || len(page.Items) != 3 || page.NextCursor == nil || *page.NextCursor != ids[2] {
			t.Fatalf("limit=3: %d %d items, cursor %v", st, len(page.Items), page.NextCursor)
		}
		// show answers the one payload, whole.
		got, err := b.as[api.RoleViewer].Get(ctx, ids[20])
		if err != nil || !jsonEqual(got.Payload, payloads[ids[20]]) {
			t.Fatalf("show: %v %.80s", err, got.Payload)
		}

		// Dead letters: the same.
		cl, err := b.as[api.RoleOperator].Claim(ctx, api.ClaimRequest{Queues: []string{"big"}, WorkerID: "w", Max: 1000})
		if err != nil || len(cl) != len(ids) {
			t.Fatalf("claim: %d %v", len(cl), err)
		}
		for _, c := range cl {
			if _, err := b.as[api.RoleOperator].Fail(ctx, c.ID, api.FailRequest{LeaseToken: c.LeaseToken,
				Outcome: backstop.OutcomePermanentError, Error: "no"}); err != nil {
				t.Fatal(err)
			}
		}
		check(t, "/v1/dlq?queue=big&limit=1000", false)
		check(t, "/v1/dlq?queue=big&limit=1000&include=payload", true)
		dl, err := b.as[api.RoleViewer].DLQShow(ctx, ids[20])
		if err != nil || !jsonEqual(dl.Payload, payloads[ids[20]]) {
			t.Fatalf("dlq show: %v %.80s", err, dl.Payload)
		}

		// Bad include values and limits are refused.
		for _, q := range []string{"include=payloads", "include=payload&include=payload", "include=", "limit=10001"} {
			for _, path := range []string{"/v1/tasks", "/v1/dlq", "/v1/runs/r-big/tasks"} {
				if st, body := b.raw(t, api.RoleViewer, "GET", path+"?"+q, "", ""); st != 400 {
					t.Errorf("%s?%s: %d %s, want 400", path, q, st, body)
				}
			}
		}
	})
}

// jsonEqual compares a JSON document with the one in want, ignoring
// formatting.
func jsonEqual(got json.RawMessage, want string) bool {
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		return false
	}
	return reflect.DeepEqual(a, b)
}

// TestBoundedListsDefaultBudget: under the default budget (4 MiB) a page of
// 3 MB of payloads, which the server reads in 1 MiB slices, comes whole in
// one answer: every item once, in order, payloads whole, no cursor.
func TestBoundedListsDefaultBudget(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		params := make([]backstop.EnqueueParams, 300)
		for i := range params {
			params[i] = backstop.EnqueueParams{Queue: "q", Kind: "k",
				Payload: json.RawMessage(fmt.Sprintf(`{"i":%d,"blob":"%s"}`, i, strings.Repeat("y", 10000)))}
		}
		rs, err := b.lib.EnqueueMany(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		items, pages := pageAll(t, b, "/v1/tasks?limit=10000&include=payload", api.DefaultListMaxBytes)
		if pages != 1 || len(items) != len(rs) {
			t.Fatalf("%d items in %d pages, want %d in 1", len(items), pages, len(rs))
		}
		for i, it := range items {
			var id string
			_ = json.Unmarshal(it["id"], &id)
			if id != rs[i].Task.ID || !jsonEqual(it["payload"], string(params[i].Payload)) {
				t.Fatalf("item %d: %s %.60s, want %s whole", i, id, it["payload"], rs[i].Task.ID)
			}
		}
	})
}
