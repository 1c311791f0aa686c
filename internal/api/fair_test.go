package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/audit"
	"github.com/backstophq/backstop/internal/testwait"
)

// TestFairQueues: PUT /v1/queues/{name}/fair makes a queue fair, GET
// /v1/fair-queues lists it, DELETE turns it off (404 when it was not);
// bad input is 400 with nothing written. Each change is in the audit
// stream with the token's name as the actor and the body's reason.
func TestFairQueues(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		for _, body := range []string{`{}`, `{"by":"bad key"}`, `{"by":"tenant","weights":{"a":0}}`, `{"by":"tenant","nope":1}`} {
			if st, raw := b.raw(t, api.RoleOperator, "PUT", "/v1/queues/q/fair", "application/json", body); st != http.StatusBadRequest {
				t.Errorf("%s: %d %s, want 400", body, st, raw)
			}
		}
		list := func() api.FairQueuesResponse {
			t.Helper()
			st, raw := b.raw(t, api.RoleViewer, "GET", "/v1/fair-queues", "", "")
			var r api.FairQueuesResponse
			if st != http.StatusOK || json.Unmarshal(raw, &r) != nil {
				t.Fatalf("list: %d %s", st, raw)
			}
			return r
		}
		if r := list(); len(r.Items) != 0 {
			t.Fatalf("bad input wrote %+v", r.Items)
		}
		if st, raw := b.raw(t, api.RoleViewer, "PUT", "/v1/queues/q/fair", "application/json", `{"by":"tenant"}`); st != http.StatusForbidden {
			t.Fatalf("viewer: %d %s, want 403", st, raw)
		}
		if st, raw := b.raw(t, api.RoleOperator, "PUT", "/v1/queues/q/fair", "application/json", `{"by":"tenant","weights":{"acme":3},"reason":"acme floods"}`); st != http.StatusOK {
			t.Fatalf("put: %d %s", st, raw)
		}
		if r := list(); len(r.Items) != 1 || r.Items[0].Queue != "q" || r.Items[0].By != "tenant" || r.Items[0].Weights["acme"] != 3 {
			t.Fatalf("list: %+v", r.Items)
		}
		long := `{"reason":"` + strings.Repeat("x", 1025) + `"}`
		if st, raw := b.raw(t, api.RoleOperator, "DELETE", "/v1/queues/q/fair", "application/json", long); st != http.StatusBadRequest {
			t.Fatalf("delete with a long reason: %d %s, want 400", st, raw)
		}
		if r := list(); len(r.Items) != 1 {
			t.Fatalf("a refused delete removed: %+v", r.Items)
		}
		if st, raw := b.raw(t, api.RoleOperator, "DELETE", "/v1/queues/q/fair", "application/json", `{"reason":"fixed"}`); st != http.StatusOK {
			t.Fatalf("delete: %d %s", st, raw)
		}
		if st, raw := b.raw(t, api.RoleOperator, "DELETE", "/v1/queues/q/fair", "", ""); st != http.StatusNotFound {
			t.Fatalf("delete again: %d %s, want 404", st, raw)
		}
		var got []string
		testwait.For(t, "the two fairness actions audited", func() bool {
			st, raw := b.raw(t, api.RoleViewer, "GET", "/v1/audit?type=queue.fair_set,queue.fair_removed", "", "")
			var p audit.Page
			if st != http.StatusOK || json.Unmarshal(raw, &p) != nil {
				t.Fatalf("audit: %d %s", st, raw)
			}
			got = got[:0]
			for _, e := range p.Items {
				got = append(got, e.Type+" "+e.Actor+" "+e.Target+" "+e.Reason)
			}
			return len(got) == 2
		})
		if want := "queue.fair_set test-operator q acme floods|queue.fair_removed test-operator q fixed"; strings.Join(got, "|") != want {
			t.Fatalf("audit: %q, want %q", got, want)
		}
	})
}
