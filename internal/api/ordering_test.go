package api_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
)

// TestOrderingKeys: GET /v1/ordering/{queue}/keys lists an ordered queue's
// keys with their buffered counts, paged with the cursor (responses checked
// against openapi.json); an unknown queue is an empty list; a bad limit is
// 400.
func TestOrderingKeys(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{lib: &backstop.Config{Queues: map[string]backstop.QueueConfig{
			"ordered": {Ordering: backstop.OrderingConfig{Enabled: true, Step: 1}}}}})
		ctx := context.Background()
		for _, p := range []struct {
			key string
			seq int64
		}{{"k1", 1}, {"k2", 1}, {"k2", 3}, {"k2", 4}, {"k3", 9}} {
			if _, err := b.lib.Enqueue(ctx, backstop.EnqueueParams{Queue: "ordered", Kind: "result", OrderingKey: p.key,
				Sequence: p.seq, Payload: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.lib.OrderQueue(ctx, "ordered"); err != nil {
			t.Fatal(err)
		}
		get := func(path string) api.OrderingKeyList {
			t.Helper()
			st, body := b.raw(t, api.RoleViewer, "GET", path, "", "")
			if st != 200 {
				t.Fatalf("GET %s: %d %s", path, st, body)
			}
			var out api.OrderingKeyList
			if err := json.Unmarshal(body, &out); err != nil {
				t.Fatal(err)
			}
			return out
		}
		page := get("/v1/ordering/ordered/keys?limit=2")
		if len(page.Items) != 2 || page.Items[0].Key != "k1" || page.Items[1].Key != "k2" || page.NextCursor == nil || *page.NextCursor != "k2" {
			t.Fatalf("first page: %+v", page)
		}
		if page.Items[0].BusyTaskID == "" || page.Items[1].Buffered != 2 {
			t.Fatalf("k1 busy %q, k2 buffered %d: want a task and 2", page.Items[0].BusyTaskID, page.Items[1].Buffered)
		}
		page = get("/v1/ordering/ordered/keys?limit=2&after=" + *page.NextCursor)
		if len(page.Items) != 1 || page.Items[0].Key != "k3" || page.NextCursor != nil {
			t.Fatalf("second page: %+v", page)
		}
		if page = get("/v1/ordering/nosuchqueue/keys"); len(page.Items) != 0 || page.Items == nil {
			t.Fatalf("unknown queue: %+v", page)
		}
		for _, q := range []string{"limit=0", "limit=1001", "limit=x", "sort=key"} {
			if st, body := b.raw(t, api.RoleViewer, "GET", "/v1/ordering/ordered/keys?"+q, "", ""); st != 400 {
				t.Fatalf("?%s: %d %s, want 400", q, st, body)
			}
		}
		if st, _ := b.raw(t, api.RoleNone, "GET", "/v1/ordering/ordered/keys", "", ""); st != 401 {
			t.Fatalf("no token: %d, want 401", st)
		}
	})
}
