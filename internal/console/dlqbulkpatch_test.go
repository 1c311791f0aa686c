package console_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/chromedp/chromedp"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
)

// A bulk replay with a merge patch shows its dry run first (how many match,
// a sample with each payload's changed paths and before/after) and waits
// for its confirm; the preview changes nothing; confirmed, each dead letter
// is replayed once with the patched payload and the operator's reason in
// its history. A patch that is not JSON is refused in the page, nothing
// sent. A single replay records its reason too.
func TestBrowserDLQBulkPatchPreview(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		var ids []string
		for i := range 3 {
			ids = append(ids, e.deadLetter(t, map[string]any{"queue": "fix", "kind": "charge",
				"payload": map[string]any{"card": "bad", "n": i}}, "card declined"))
		}
		single := e.deadLetter(t, map[string]any{"queue": "one", "kind": "charge", "payload": map[string]any{"card": "bad"}}, "card declined")
		untouched := func(what string) {
			t.Helper()
			for _, id := range ids {
				if tk := e.task(t, id); tk.State != bt.StateDead || tk.ReplayCount != 0 {
					t.Fatalf("%s: %s is %s with %d replays, want still dead", what, id, tk.State, tk.ReplayCount)
				}
			}
		}
		ctx := browser(t)
		e.signIn(t, ctx, api.RoleAdmin)
		run(t, ctx, "open the queue's dead letters", nav(e.url+"/#/dlq?queue=fix&status=open"), visible("#bulk-replay"))

		run(t, ctx, "a patch that is not JSON", chromedp.SetValue(chromedp.CSS("#bulk-patch"), `{"card": `), click("#bulk-replay"),
			poll(`document.querySelector("#bulk-error").textContent.includes("not JSON")`))
		if n := count(t, ctx, "#bulk-confirm:not([hidden])"); n != 0 {
			t.Fatal("a confirm is offered for a patch that is not JSON")
		}
		untouched("after a patch that is not JSON")

		// With a patch, "Replay all" previews and waits for the confirm.
		run(t, ctx, "preview the patched replay",
			chromedp.SetValue(chromedp.CSS("#bulk-patch"), `{"card": "good"}`),
			chromedp.SetValue(chromedp.CSS("#bulk-why"), "card service fixed"),
			click("#bulk-replay"),
			poll(`document.querySelector("#bulk-matched") && document.querySelector("#bulk-matched").dataset.matched === "3" &&
				!document.querySelector("#bulk-confirm").hidden`))
		if n := count(t, ctx, "#bulk-preview-out li.sample"); n != 3 {
			t.Fatalf("the preview shows %d samples, want 3", n)
		}
		paths := evalJS[[]string](t, ctx, "changed paths", `[...document.querySelectorAll("#bulk-preview-out .changes li")].map((li) => li.dataset.op + " " + li.dataset.path)`)
		if len(paths) != 3 || paths[0] != "replace /card" {
			t.Fatalf("changed paths: %v, want replace /card for each sample", paths)
		}
		before, after := text(t, ctx, "#bulk-preview-out pre.before"), text(t, ctx, "#bulk-preview-out pre.after")
		if !contains(before, `"bad"`) || !contains(after, `"good"`) || contains(after, `"bad"`) {
			t.Fatalf("before %q, after %q", before, after)
		}
		screenshot(t, ctx, "dlq-bulk-preview")
		untouched("after the preview")

		run(t, ctx, "confirm", click("#bulk-confirm"),
			poll(`document.querySelector("#bulk").dataset.status === "done" && document.querySelector("#bulk-progress").value === 3`))
		for _, id := range ids {
			tk := e.task(t, id)
			var p struct {
				Card string `json:"card"`
			}
			if err := json.Unmarshal(tk.Payload, &p); err != nil {
				t.Fatal(err)
			}
			if tk.State == bt.StateDead || tk.ReplayCount != 1 || p.Card != "good" {
				t.Fatalf("%s after the confirm: %s, %d replays, card %q (want replayed once with card good)", id, tk.State, tk.ReplayCount, p.Card)
			}
			if r := lastReplayReason(t, e, id); r != "card service fixed" {
				t.Fatalf("%s: the replay's reason in the history is %q", id, r)
			}
		}

		// A single replay takes its reason too.
		run(t, ctx, "open the single dead letter", nav(e.url+"/#/dlq/"+single), visible("#replay-form"))
		run(t, ctx, "replay it with a reason", chromedp.SetValue(chromedp.CSS("#replay-why"), "one-off fix"),
			click("#replay-preview"), visible("#replay-confirm"), click("#replay-confirm"),
			poll(`location.hash.startsWith("#/tasks/")`))
		if r := lastReplayReason(t, e, single); r != "one-off fix" {
			t.Fatalf("single replay's reason in the history: %q", r)
		}
	})
}

// lastReplayReason is the reason of the task's last dlq.replayed event.
func lastReplayReason(t *testing.T, e *env, id string) string {
	t.Helper()
	evs, err := e.lib.Events(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	reason := ""
	for _, ev := range evs {
		if ev.Type != "dlq.replayed" {
			continue
		}
		var body struct {
			Reason string `json:"reason"`
		}
		if err := json.Unmarshal(ev.Body, &body); err != nil {
			t.Fatal(err)
		}
		reason = body.Reason
	}
	return reason
}
