package console_test

import (
	"context"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
)

// The schedules page: each schedule with its timing, next tick and last
// run (outcome and task, linked); an operator pauses and resumes one with
// its buttons (the API's pause and resume), a viewer sees no button.
func TestBrowserSchedules(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		bg := context.Background()
		for _, p := range []backstop.ScheduleParams{
			{Name: "minutely", Every: time.Minute, Queue: "reports", Kind: "build"},
			{Name: "nightly", Cron: "0 3 * * *", TZ: "Europe/Paris", Queue: "reports", Kind: "nightly"},
		} {
			if _, err := e.lib.AddSchedule(bg, p); err != nil {
				t.Fatal(err)
			}
		}
		// A minute later one round of maintenance enqueues minutely's tick.
		e.clock.Advance(61 * time.Second)
		if err := backstop.Maintain(bg, e.lib); err != nil {
			t.Fatal(err)
		}
		s, err := e.lib.Schedule(bg, "minutely")
		if err != nil || s.LastTaskID == "" {
			t.Fatalf("minutely after a tick: %+v %v", s, err)
		}

		ctx := browser(t)
		e.signIn(t, ctx, api.RoleViewer)
		run(t, ctx, "open Schedules from the nav", click(`#nav a[data-page="schedules"]`), visible("#schedules table"))
		if got := text(t, ctx, `#schedules tr[data-name="nightly"] td.schedule`); !contains(got, "0 3 * * *") || !contains(got, "Europe/Paris") {
			t.Fatalf("nightly's schedule: %q", got)
		}
		if got := text(t, ctx, `#schedules tr[data-name="nightly"] td.last`); got != "never" {
			t.Fatalf("nightly's last run: %q, want never", got)
		}
		if got := text(t, ctx, `#schedules tr[data-name="minutely"] td.last`); !contains(got, s.LastOutcome) || !contains(got, s.LastTaskID) {
			t.Fatalf("minutely's last run: %q, want %s and task %s", got, s.LastOutcome, s.LastTaskID)
		}
		if n := count(t, ctx, "#schedules button"); n != 0 {
			t.Fatalf("a viewer sees %d buttons", n)
		}
		run(t, ctx, "open the last task", click(`#schedules tr[data-name="minutely"] td.last a`), visible("#task-state"))
		if h := evalJS[string](t, ctx, "address", `location.hash`); h != "#/tasks/"+s.LastTaskID {
			t.Fatalf("last task link: %q", h)
		}

		ctx = browser(t)
		e.signIn(t, ctx, api.RoleOperator)
		run(t, ctx, "open Schedules", nav(e.url+"/#/schedules"), visible(`#schedules tr[data-name="nightly"] button.pause`))
		run(t, ctx, "pause nightly", click(`#schedules tr[data-name="nightly"] button.pause`),
			visible(`#schedules tr[data-name="nightly"][data-paused="true"] button.resume`))
		waitText(t, ctx, `#schedules tr[data-name="nightly"] td.next`, "paused")
		if got, err := e.lib.Schedule(bg, "nightly"); err != nil || !got.Paused {
			t.Fatalf("nightly after pause: %+v %v", got, err)
		}
		screenshot(t, ctx, "schedules")
		run(t, ctx, "resume nightly", click(`#schedules tr[data-name="nightly"] button.resume`),
			visible(`#schedules tr[data-name="nightly"][data-paused="false"] button.pause`))
		if got, err := e.lib.Schedule(bg, "nightly"); err != nil || got.Paused {
			t.Fatalf("nightly after resume: %+v %v", got, err)
		}
	})
}
