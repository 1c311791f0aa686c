package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/store"
)

// slowReads is a store whose task listings, once armed, let `pass` of
// them through and then take longer than the test's where time budget:
// a database too slow for it.
type slowReads struct {
	store.Store
	armed atomic.Bool
	pass  atomic.Int64
}

func (s *slowReads) List(ctx context.Context, f store.ListFilter) ([]*bt.Task, error) {
	if s.armed.Load() && s.pass.Add(-1) < 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * whereTime):
		}
	}
	return s.Store.List(ctx, f)
}

const whereTime = 300 * time.Millisecond

// TestWhereBudget: a where evaluated in Go runs under the request's
// budget. The request (three exists deep over a 100-element list)
// answers 400 naming the cost budget at once instead of burning CPU; a
// tiny cost budget stops a Go-side listing and grouped count with 400
// naming limits.where_cost; a redrive whose batch spends its time budget
// (its reads hang) ends over_budget naming limits.where_time, and resumes
// to done once the store answers again.
func TestWhereBudget(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		var slow *slowReads
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1, lib: &backstop.Config{WhereTime: whereTime},
			wrap: func(s store.Store) store.Store { slow = &slowReads{Store: s}; return slow }})
		ctx := context.Background()
		op, admin := b.as[api.RoleOperator], b.as[api.RoleAdmin]
		var list strings.Builder
		for i := range 100 {
			if i > 0 {
				list.WriteString(",")
			}
			fmt.Fprint(&list, i)
		}
		for i := range 3 {
			if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "wb", Kind: "k", MaxAttempts: 1,
				Payload: json.RawMessage(fmt.Sprintf(`{"i":%d,"L":[%s]}`, i, list.String()))}); err != nil {
				t.Fatal(err)
			}
			c := claimOne(t, op, "wb")
			if _, err := op.Fail(ctx, c.ID, api.FailRequest{LeaseToken: c.LeaseToken, Outcome: backstop.OutcomePermanentError, Error: "x"}); err != nil {
				t.Fatal(err)
			}
		}
		refused := func(path, want string) {
			t.Helper()
			st, body := b.raw(t, api.RoleViewer, "GET", path, "", "")
			var p struct {
				Code, Field, Detail string
			}
			_ = json.Unmarshal(body, &p)
			if st != 400 || p.Code != "invalid_input" || p.Field != "where" || !strings.Contains(p.Detail, want) {
				t.Fatalf("%s: %d %s, want 400 naming where and %q", path, st, body, want)
			}
		}
		deep := url.QueryEscape(`payload.L.exists(a, payload.L.exists(b, payload.L.exists(c, c < 0)))`)
		// One task's evaluation passes the per-task cost limit (or, on a
		// loaded machine, the short time budget first).
		refused("/v1/tasks?queue=wb&where="+deep, "budget (")
		refused("/v1/dlq?queue=wb&where="+deep, "budget (")
		refused("/v1/dlq/groups?queue=wb&where="+deep, "budget (")

		// A redrive: its count passes, its first batch's read hangs past
		// the time budget: over_budget, nothing replayed, resumable.
		const goWhere = `payload.L.exists(x, x == 99)`
		slow.pass.Store(1)
		slow.armed.Store(true)
		st, err := admin.Redrive(ctx, api.RedriveRequest{Queue: "wb", Where: goWhere, Wait: bt.Duration(20 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != "over_budget" || !strings.Contains(st.Error, "limits.where_time") || st.Replayed != 0 {
			t.Fatalf("redrive: status %q error %q replayed %d, want over_budget naming limits.where_time", st.Status, st.Error, st.Replayed)
		}
		if got, err := admin.RedriveStatus(ctx, st.RedriveID); err != nil || got.Status != "over_budget" {
			t.Fatalf("redrive status: %+v %v", got, err)
		}
		slow.armed.Store(false)
		res, err := admin.ResumeRedrive(ctx, st.RedriveID, api.ResumeRequest{Wait: bt.Duration(20 * time.Second)})
		if err != nil || res.Status != "done" || res.Replayed != 3 {
			t.Fatalf("resumed: %+v %v", res, err)
		}
	})
}

// TestWhereCostBudget: a small limits.where_cost stops a Go-side listing
// and count with 400 naming it; the SQL subset is not counted.
func TestWhereCostBudget(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1, lib: &backstop.Config{WhereCost: 50}})
		ctx := context.Background()
		op := b.as[api.RoleOperator]
		for i := range 20 {
			if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "wc", Kind: "k", Payload: json.RawMessage(fmt.Sprintf(`{"tags":["a","b","c"],"n":%d}`, i))}); err != nil {
				t.Fatal(err)
			}
		}
		st, body := b.raw(t, api.RoleViewer, "GET", "/v1/tasks?queue=wc&where="+url.QueryEscape(`payload.tags.exists(t, t == "z")`), "", "")
		if st != 400 || !strings.Contains(string(body), "limits.where_cost") {
			t.Fatalf("Go-side listing: %d %s", st, body)
		}
		st, body = b.raw(t, api.RoleViewer, "GET", "/v1/tasks?queue=wc&where="+url.QueryEscape(`payload.n >= 0`), "", "")
		if st != 200 || strings.Count(string(body), `"id"`) != 20 {
			t.Fatalf("SQL listing: %d %s", st, body)
		}
	})
}
