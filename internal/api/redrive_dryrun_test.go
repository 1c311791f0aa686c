package api_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// POST /v1/dlq/redrive with dry_run: the count, a sample and the patch's
// diffs (masked: a secret-looking key's value never shows), and nothing
// changed: the dead letters stay, no event is written, no redrive starts
// (the real redrive afterwards is not a resumed one).
func TestRedriveDryRun(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		admin := b.as[api.RoleAdmin]
		for range 3 {
			kill(t, b, apiclient.Task{Queue: "dry", Kind: "k", Payload: json.RawMessage(`{"n":1,"password":"old-secret","keep":true}`)})
		}
		_, err := admin.Redrive(ctx, api.RedriveRequest{Queue: "dry", DryRun: true, Sample: 101})
		mustCode(t, err, "invalid_input")
		st, err := admin.Redrive(ctx, api.RedriveRequest{Queue: "dry", DryRun: true, Sample: 2,
			PatchRequest: api.PatchRequest{MergePatch: json.RawMessage(`{"n":2,"keep":null}`), Patch: json.RawMessage(`{"password":"new-secret"}`)}})
		if err != nil || st.Status != "dry_run" || !st.DryRun || st.RedriveID != "" || st.Total != 3 || st.Preview == nil ||
			st.Preview.Matched != 3 || len(st.Preview.Sample) != 2 {
			t.Fatalf("dry run: %+v %v", st, err)
		}
		s := st.Preview.Sample[0]
		if s.Queue != "dry" || s.Kind != "k" || s.Reason == "" || s.Diff == nil {
			t.Fatalf("sample: %+v", s)
		}
		raw, _ := json.Marshal(s.Diff)
		if got := string(raw); strings.Contains(got, "secret") ||
			!strings.Contains(got, `"changes":[{"op":"remove","path":"/keep"},{"op":"replace","path":"/n"},{"op":"replace","path":"/password"}]`) ||
			!strings.Contains(got, `"n":1`) || !strings.Contains(got, `"n":2`) {
			t.Fatalf("diff: %s", got)
		}
		// A patch that does not apply to a payload says so per item.
		st, err = admin.Redrive(ctx, api.RedriveRequest{Queue: "dry", DryRun: true,
			PatchRequest: api.PatchRequest{Patch: json.RawMessage(`[{"path":"n.deeper","value":1}]`)}})
		if err != nil || st.Preview == nil || len(st.Preview.Sample) != 3 || st.Preview.Sample[0].Diff == nil ||
			st.Preview.Sample[0].Diff.Error == "" || st.Preview.Sample[0].Diff.After != nil {
			t.Fatalf("dry run of a patch that does not apply: %+v %v", st, err)
		}
		l, err := admin.List(ctx, url.Values{"queue": {"dry"}, "state": {"dead"}})
		if err != nil || len(l.Items) != 3 {
			t.Fatalf("after the dry runs: %+v %v", l, err)
		}
		evs, err := b.lib.Events(ctx, l.Items[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if strings.HasPrefix(e.Type, "dlq.") {
				t.Fatalf("the dry run wrote %s", e.Type)
			}
		}
		res, err := admin.Redrive(ctx, api.RedriveRequest{Queue: "dry", Wait: bt.Duration(20 * time.Second)})
		if err != nil || res.Resumed || res.Status != "done" || res.Replayed != 3 {
			t.Fatalf("the real redrive: %+v %v", res, err)
		}
	})
}
