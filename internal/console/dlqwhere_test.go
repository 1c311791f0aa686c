package console_test

import (
	"net/url"
	"testing"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
)

// The DLQ page with a where outside the SQL subset (evaluated in Go): the
// list, the grouped counts and "replay all N matching" take it, and the
// redrive replays exactly its matches (issue 17).
func TestBrowserDLQGoWhere(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		var vip, std []string
		for i := range 6 {
			tags := []string{"std"}
			if i%2 == 0 {
				tags = []string{"vip", "std"}
			}
			id := e.deadLetter(t, map[string]any{"queue": "gw", "kind": "charge", "payload": map[string]any{"n": i, "tags": tags}}, "bank timeout")
			if i%2 == 0 {
				vip = append(vip, id)
			} else {
				std = append(std, id)
			}
		}
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleAdmin)
		where := url.QueryEscape(`payload.tags.exists(t, t == "vip")`)
		run(t, ctx, "open the DLQ by a Go-side where", nav(e.url+"/#/dlq?queue=gw&status=open&where="+where), visible("#bulk-replay"))
		if n := evalJS[string](t, ctx, "total", `document.querySelector("#dlq-groups").dataset.total`); n != "3" {
			t.Fatalf("total: %s, want 3", n)
		}
		if errs := text(t, ctx, "#groups-error"); !contains(errs, "bank timeout3") {
			t.Fatalf("error groups: %q", errs)
		}
		if n := count(t, ctx, "#dlq-list tbody tr"); n != 3 {
			t.Fatalf("%d rows, want 3", n)
		}
		if s := text(t, ctx, "#bulk-replay"); !contains(s, "Replay all 3 matching") {
			t.Fatalf("bulk button: %q", s)
		}
		run(t, ctx, "replay all 3", click("#bulk-replay"),
			poll(`document.querySelector("#bulk").dataset.status === "done" && document.querySelector("#bulk-progress").value === 3`))
		for _, id := range vip {
			if tk := e.task(t, id); tk.State != bt.StatePending || tk.ReplayCount != 1 {
				t.Fatalf("%s after the bulk replay: %s, replays %d (want pending, replayed once)", id, tk.State, tk.ReplayCount)
			}
		}
		for _, id := range std {
			if tk := e.task(t, id); tk.State != bt.StateDead || tk.ReplayCount != 0 {
				t.Fatalf("%s (not matching) after the bulk replay: %s, replays %d", id, tk.State, tk.ReplayCount)
			}
		}
	})
}
