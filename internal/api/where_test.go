package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// TestWhere: GET /v1/tasks, /v1/dlq, /v1/dlq/export and /v1/dlq/groups
// take where (a CEL condition on the payload and attributes), in SQL or in
// Go; POST /v1/dlq/redrive takes it in its body (in SQL or in Go, a dry
// run too); a bad
// expression is 400 naming where, nothing done; a key redacted from the
// caller's view is refused unless raw=true.
func TestWhere(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		op := b.as[api.RoleOperator]
		var dead []string
		for i := range 9 {
			tags := `["std"]`
			if i%3 == 0 {
				tags = `["vip"]`
			}
			p := fmt.Sprintf(`{"customer":{"id":%d},"tags":%s,"password":"pw-%d"}`, 40+i%3, tags, i)
			tenant := []string{"acme", "globex"}[i%2]
			if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "wh", Kind: "k", Payload: json.RawMessage(p), MaxAttempts: 1,
				Attributes: map[string]string{"tenant": tenant}}); err != nil {
				t.Fatal(err)
			}
			c := claimOne(t, op, "wh")
			if _, err := op.Fail(ctx, c.ID, api.FailRequest{LeaseToken: c.LeaseToken, Outcome: backstop.OutcomePermanentError, Error: "x"}); err != nil {
				t.Fatal(err)
			}
			dead = append(dead, c.ID)
		}
		// i = 0..8: customer 40+i%3, tenant acme when i is even, vip when i%3 == 0.
		pick := func(f func(i int) bool) []string {
			var out []string
			for i, id := range dead {
				if f(i) {
					out = append(out, id)
				}
			}
			return out
		}
		acme42 := pick(func(i int) bool { return i%3 == 2 && i%2 == 0 })
		vip := pick(func(i int) bool { return i%3 == 0 })
		get := func(role api.Role, path string) (int, []byte) {
			t.Helper()
			return b.raw(t, role, "GET", path, "", "")
		}
		listIDs := func(role api.Role, path string) []string {
			t.Helper()
			st, body := get(role, path)
			if st != 200 {
				t.Fatalf("%s: %d %s", path, st, body)
			}
			var page api.ListResponse
			if err := json.Unmarshal(body, &page); err != nil {
				t.Fatal(err)
			}
			out := []string{}
			for _, v := range page.Items {
				out = append(out, v.ID)
			}
			return out
		}
		const sqlWhere = `payload.customer.id == 42 && attributes.tenant == "acme"`
		const goWhere = `payload.tags.exists(t, t == "vip")`
		w := func(s string) string { return "where=" + url.QueryEscape(s) }
		for _, path := range []string{"/v1/tasks?queue=wh&", "/v1/dlq?"} {
			if got := listIDs(api.RoleViewer, path+w(sqlWhere)); !slices.Equal(got, acme42) {
				t.Errorf("%s by payload (SQL): %v, want %v", path, got, acme42)
			}
			if got := listIDs(api.RoleViewer, path+w(goWhere)); !slices.Equal(got, vip) {
				t.Errorf("%s by payload (Go): %v, want %v", path, got, vip)
			}
		}
		// A Go-side filter pages by next_cursor.
		var paged []string
		next := ""
		for {
			st, body := get(api.RoleViewer, "/v1/dlq?limit=2&"+w(goWhere)+next)
			if st != 200 {
				t.Fatalf("%d %s", st, body)
			}
			var page api.ListResponse
			_ = json.Unmarshal(body, &page)
			for _, v := range page.Items {
				paged = append(paged, v.ID)
			}
			if page.NextCursor == nil || *page.NextCursor == "" {
				break
			}
			next = "&after=" + url.QueryEscape(*page.NextCursor)
		}
		if !slices.Equal(paged, vip) {
			t.Errorf("paged by a Go-side where: %v, want %v", paged, vip)
		}
		// Export and groups.
		st, body := get(api.RoleViewer, "/v1/dlq/export?"+w(sqlWhere))
		if st != 200 {
			t.Fatalf("export: %d %s", st, body)
		}
		var exported []string
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var d struct{ ID string }
			_ = json.Unmarshal(sc.Bytes(), &d)
			exported = append(exported, d.ID)
		}
		if !slices.Equal(exported, acme42) {
			t.Errorf("export by payload: %v, want %v", exported, acme42)
		}
		if st, body := get(api.RoleViewer, "/v1/dlq/groups?"+w(sqlWhere)); st != 200 || !strings.Contains(string(body), fmt.Sprintf(`"count":%d`, len(acme42))) {
			t.Errorf("groups by payload: %d %s", st, body)
		}
		// Groups by a Go-side where: counted in Go, the same shape.
		for _, q := range []string{"", "status=open&"} {
			st, body := get(api.RoleViewer, "/v1/dlq/groups?"+q+w(goWhere))
			var g api.DLQGroups
			if st != 200 || json.Unmarshal(body, &g) != nil || g.Total != len(vip) || len(g.ByReason) != 1 ||
				g.ByReason[0].Value != "permanent_error" || g.ByReason[0].Count != len(vip) ||
				len(g.ByError) != 1 || g.ByError[0].Value != "x" || g.ByError[0].Count != len(vip) {
				t.Errorf("groups by a Go-side where (%s): %d %s, want %d", q, st, body, len(vip))
			}
		}
		// Bad expressions: 400 naming where (and CEL's position).
		for _, bad := range []string{`payload.customer.id ==`, `payload.customer.id`, `attributes.tenant == 42`} {
			for _, path := range []string{"/v1/tasks?", "/v1/dlq?", "/v1/dlq/export?", "/v1/dlq/groups?"} {
				st, body := get(api.RoleViewer, path+w(bad))
				if st != 400 || !strings.Contains(string(body), "where") {
					t.Errorf("%s where %q: %d %s, want 400 naming where", path, bad, st, body)
				}
			}
		}
		if _, body := get(api.RoleViewer, "/v1/dlq?"+w(`payload.customer.id ==`)); !strings.Contains(string(body), "1:23") {
			t.Errorf("no position in %s", body)
		}
		// Redaction: a masked key's value cannot be filtered on in a masked
		// view (it would be revealed by the answer); an admin's raw view may.
		for _, role := range []api.Role{api.RoleViewer, api.RoleOperator, api.RoleAdmin} {
			for _, path := range []string{"/v1/tasks?", "/v1/dlq?", "/v1/dlq/export?", "/v1/dlq/groups?"} {
				st, body := get(role, path+w(`payload.password == "pw-4"`))
				if st != 400 || !strings.Contains(string(body), `\"password\"`) {
					t.Errorf("%s as %s by a masked key: %d %s, want 400 naming it", path, role, st, body)
				}
			}
			if st, _ := get(role, "/v1/dlq?"+w(`payload.customer.exists(k, payload.customer[k] == 1)`)); st != 400 {
				t.Errorf("a computed index as %s: %d, want 400", role, st)
			}
		}
		if got := listIDs(api.RoleAdmin, "/v1/dlq?raw=true&"+w(`payload.password == "pw-4"`)); !slices.Equal(got, dead[4:5]) {
			t.Errorf("raw filter on a masked key: %v, want %v", got, dead[4:5])
		}
		// Redrive by payload: a bad expression is 400, nothing replayed; a
		// dry run by a Go-side where counts and samples its matches.
		admin := b.as[api.RoleAdmin]
		if _, err := admin.Redrive(ctx, api.RedriveRequest{Where: `payload.customer.id ==`}); err == nil || !strings.Contains(err.Error(), "where") {
			t.Errorf("redrive by a bad where: %v, want 400 naming where", err)
		}
		pre, err := admin.Redrive(ctx, api.RedriveRequest{Where: goWhere, DryRun: true})
		if err != nil || pre.Status != "dry_run" || pre.Preview == nil || pre.Preview.Matched != len(vip) || len(pre.Preview.Sample) != len(vip) ||
			pre.Preview.Sample[0].ID != vip[0] {
			t.Fatalf("dry run by a Go-side where: %+v %v, want %d matched", pre, err, len(vip))
		}
		if got := listIDs(api.RoleViewer, "/v1/dlq?status=open"); len(got) != len(dead) {
			t.Fatalf("after a refused redrive and a dry run: %d open, want %d", len(got), len(dead))
		}
		rs, err := admin.Redrive(ctx, api.RedriveRequest{Where: sqlWhere, Wait: backstop.Duration(10e9)})
		if err != nil {
			t.Fatal(err)
		}
		if rs.Replayed != len(acme42) || rs.Status != "done" {
			t.Fatalf("redrive by payload: %+v, want %d replayed", rs, len(acme42))
		}
		if got := listIDs(api.RoleViewer, "/v1/dlq?status=open&"+w(sqlWhere)); len(got) != 0 {
			t.Errorf("still open after the redrive: %v", got)
		}
		if got := listIDs(api.RoleViewer, "/v1/dlq?status=open"); len(got) != len(dead)-len(acme42) {
			t.Errorf("open after the redrive: %d, want %d", len(got), len(dead)-len(acme42))
		}
		// A redrive by a Go-side where replays exactly its matches.
		rs, err = admin.Redrive(ctx, api.RedriveRequest{Where: goWhere, Wait: backstop.Duration(10e9)})
		if err != nil || rs.Replayed != len(vip) || rs.Failed != 0 || rs.Total != len(vip) || rs.Status != "done" {
			t.Fatalf("redrive by a Go-side where: %+v %v, want %d replayed", rs, err, len(vip))
		}
		if got := listIDs(api.RoleViewer, "/v1/dlq?status=open&"+w(goWhere)); len(got) != 0 {
			t.Errorf("still open after the Go-side redrive: %v", got)
		}
		if got := listIDs(api.RoleViewer, "/v1/dlq?status=open"); len(got) != len(dead)-len(acme42)-len(vip) {
			t.Errorf("open after the Go-side redrive: %d, want %d", len(got), len(dead)-len(acme42)-len(vip))
		}
	})
}
