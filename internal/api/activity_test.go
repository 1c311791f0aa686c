package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/maintenance"
)

// GET /v1/activity?window=24h|7d reads the activity rollup the maintenance
// pass wrote: a point per bucket (five minutes over 24 h, an hour over
// 7 d), the window's totals and its queue × kind groups, of one queue or
// kind when asked; a bad window, window with minutes, or queue without
// window is a 400 naming the problem.
func TestActivityHistory(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		op := b.as[api.RoleOperator]
		for range 2 {
			if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "ok", Kind: "k"}); err != nil {
				t.Fatal(err)
			}
			c := claimOne(t, op, "ok")
			if _, err := op.Complete(ctx, c.ID, api.CompleteRequest{LeaseToken: c.LeaseToken}); err != nil {
				t.Fatal(err)
			}
		}
		kill(t, b, apiclient.Task{Queue: "bad", Kind: "k"})
		if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "retry", Kind: "r", MaxAttempts: 5}); err != nil {
			t.Fatal(err)
		}
		c := claimOne(t, op, "retry")
		if _, err := op.Fail(ctx, c.ID, api.FailRequest{LeaseToken: c.LeaseToken, Outcome: bt.OutcomeTransientError, Error: "flaky"}); err != nil {
			t.Fatal(err)
		}

		get := func(q string) (int, string, backstop.ActivityReport) {
			t.Helper()
			code, out := b.raw(t, api.RoleViewer, "GET", "/v1/activity"+q, "", "")
			var rep backstop.ActivityReport
			if code == http.StatusOK {
				if err := json.Unmarshal(out, &rep); err != nil {
					t.Fatal(err)
				}
			}
			return code, string(out), rep
		}
		// Before the rollup ran: every bucket, all zeros, no watermark.
		code, out, rep := get("?window=24h")
		if code != http.StatusOK || len(rep.Series) != 288 || rep.RolledUpTo != nil || rep.Totals.Succeeded != 0 {
			t.Fatalf("before the rollup: %d %d points, rolled up to %v: %.300s", code, len(rep.Series), rep.RolledUpTo, out)
		}
		b.clock.Advance(maintenance.ActivitySettle + time.Second)
		if err := backstop.Maintain(ctx, b.lib); err != nil {
			t.Fatal(err)
		}
		for _, w := range []struct {
			q      string
			points int
		}{{"?window=24h", 288}, {"?window=7d", 168}} {
			code, out, rep := get(w.q)
			tot := rep.Totals
			if code != http.StatusOK || len(rep.Series) != w.points || rep.RolledUpTo == nil ||
				[4]int64{tot.Succeeded, tot.Failed, tot.Retried, tot.Dead} != [4]int64{2, 2, 1, 1} || len(rep.Groups) != 3 {
				t.Fatalf("GET /v1/activity%s: %d, %d points, totals %+v, %d groups: %.400s", w.q, code, len(rep.Series), tot, len(rep.Groups), out)
			}
			var sum int64
			for _, p := range rep.Series {
				sum += p.Succeeded
			}
			if sum != 2 || tot.RunP50 == nil || tot.WaitP50 == nil || tot.FailureRate == nil || *tot.FailureRate != 0.5 {
				t.Fatalf("GET /v1/activity%s: series sum %d, totals %+v", w.q, sum, tot)
			}
		}
		if _, out, rep := get("?window=24h&queue=retry"); rep.Totals.Failed != 1 || rep.Totals.Retried != 1 || rep.Totals.Succeeded != 0 || rep.Queue != "retry" {
			t.Fatalf("queue=retry: %.400s", out)
		}
		if _, out, rep := get("?window=7d&kind=k"); rep.Totals.Succeeded != 2 || rep.Totals.Dead != 1 || rep.Totals.Retried != 0 || len(rep.Groups) != 2 {
			t.Fatalf("kind=k: %.400s", out)
		}
		for q, want := range map[string]string{
			"?window=1h":              "window",
			"?window=":                "window",
			"?window=24h&minutes=60":  "minutes and window",
			"?queue=ok":               "need window",
			"?window=24h&queue=a%20b": "queue",
			"?window=24h&since=x":     "unknown parameter",
		} {
			if code, out, _ := get(q); code != http.StatusBadRequest || !strings.Contains(out, want) {
				t.Fatalf("GET /v1/activity%s: %d %s, want 400 naming %q", q, code, out, want)
			}
		}
	})
}
