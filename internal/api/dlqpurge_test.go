package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/testwait"
)

// TestPurgeWhereAndFloor: POST /v1/dlq/purge with where deletes only the
// closed dead letters it matches (in SQL or in Go), also by a redacted key
// (the admin's); an invalid where is a 400 naming where with nothing deleted;
// an older_than below the server's purge floor is a 400 naming
// purge_floor and both ages unless below_floor, which the dlq.purged event
// records.
func TestPurgeWhereAndFloor(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1, lib: &backstop.Config{PurgeFloor: 24 * time.Hour}})
		ctx := context.Background()
		admin := b.as[api.RoleAdmin]
		kinds := map[string]string{}
		for i, kind := range []string{"a", "a", "b", "a", "b"} {
			id := kill(t, b, apiclient.Task{Queue: "pw", Kind: "k",
				Payload: json.RawMessage(`{"cause":"` + kind + `","token":"t` + kind + `","n":` + strconv.Itoa(i) + `}`)})
			kinds[id] = kind
			if _, err := admin.Discard(ctx, id, "obsolete"); err != nil {
				t.Fatal(err)
			}
		}
		left := func() map[string]int {
			t.Helper()
			out := map[string]int{}
			for id, kind := range kinds {
				if _, err := b.lib.Get(ctx, id); err == nil {
					out[kind]++
				}
			}
			return out
		}
		all := map[string]int{"a": 3, "b": 2}
		same := func(what string, want map[string]int) {
			t.Helper()
			if got := left(); len(got) != len(want) || got["a"] != want["a"] || got["b"] != want["b"] {
				t.Fatalf("%s: %v left, want %v", what, got, want)
			}
		}
		for _, bad := range []struct {
			req         api.PurgeRequest
			field, want string
		}{
			{api.PurgeRequest{}, "older_than", "below dlq.purge_floor 24h"},
			{api.PurgeRequest{OlderThan: bt.Duration(time.Hour), Where: `payload.cause == "a"`}, "older_than", "1h is below dlq.purge_floor 24h"},
			{api.PurgeRequest{BelowFloor: true, Where: `payload.cause ==`}, "where", "Syntax error"},
		} {
			_, err := admin.PurgeDLQ(ctx, bad.req)
			var p *api.Problem
			if !errors.As(err, &p) || p.Status != 400 || p.Field != bad.field || !strings.Contains(p.Detail, bad.want) {
				t.Fatalf("purge %+v: %v, want 400 naming %s with %q", bad.req, err, bad.field, bad.want)
			}
			same("after a refused purge", all)
		}
		// The admin's purge may name a redacted key (as redrive and close
		// may: an admin may see payloads raw).
		pr, err := admin.PurgeDLQ(ctx, api.PurgeRequest{BelowFloor: true, Where: `payload.token == "ta"`, DryRun: true})
		if err != nil || pr.WouldPurge != 3 {
			t.Fatalf("dry run on a redacted key: %+v %v", pr, err)
		}
		pr, err = admin.PurgeDLQ(ctx, api.PurgeRequest{BelowFloor: true, Where: `payload.cause.startsWith("b")`, DryRun: true})
		if err != nil || pr.WouldPurge != 2 {
			t.Fatalf("dry run in Go: %+v %v", pr, err)
		}
		same("after the dry run", all)
		pr, err = admin.PurgeDLQ(ctx, api.PurgeRequest{BelowFloor: true, Where: `payload.cause == "a"`, Reason: "cause a fixed"})
		if err != nil || pr.Purged != 3 {
			t.Fatalf("purge where: %+v %v", pr, err)
		}
		same("after the purge where", map[string]int{"b": 2})
		var page backstop.EventPage
		testwait.For(t, "the dlq.purged event to be served", func() bool {
			page, err = b.lib.ReadEvents(ctx, backstop.ReadEventsParams{Stream: "type.dlq.purged"})
			return err != nil || len(page.Events) > 0
		})
		if err != nil || len(page.Events) != 1 || page.Events[0].Actor != "test-admin" ||
			!strings.Contains(string(page.Events[0].Body), `"below_floor":true`) || !strings.Contains(string(page.Events[0].Body), `"where":"payload.cause == \"a\""`) {
			t.Fatalf("dlq.purged: %+v %v", page, err)
		}
	})
}
