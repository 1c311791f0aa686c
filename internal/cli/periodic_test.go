package cli

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// TestPeriodicCLI: every periodic command on --db and on --server (a
// real API on loopback over the same database): add (cron in a zone,
// interval), list (-o json with the contract's keys), pause, resume,
// remove; a duplicate name exits 4, an unknown one 3.
func TestPeriodicCLI(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		r := newRemoteEnv(t, e, "admin")
		srv := []string{"--server", r.url, "--token", r.token}

		var in backstop.ScheduleInfo
		e.json(&in, "periodic", "add", "nightly", "--cron", "0 3 * * *", "--tz", "Europe/Paris", "--queue", "reports",
			"--kind", "nightly", "--attr", "team=ops", "--missed", "once")
		if in.Name != "nightly" || in.Schedule != "cron 0 3 * * * Europe/Paris" || in.Missed != "once" || in.Attributes["team"] != "ops" ||
			in.NextRunAt.IsZero() || in.Paused || in.LastRunAt != nil {
			t.Fatalf("add --db: %+v", in)
		}
		e.json(&in, append(srv, "periodic", "add", "hb", "--every", "30s", "--queue", "ops", "--kind", "ping", "--payload", `{"k":1}`)...)
		if in.Name != "hb" || in.Schedule != "every 30s" || in.Missed != "skip" || compact(in.Payload) != `{"k":1}` ||
			in.NextRunAt.Second()%30 != 0 {
			t.Fatalf("add --server: %+v", in)
		}
		e.fails(ExitConflict, "already exists", "periodic", "add", "hb", "--every", "1m", "--queue", "ops", "--kind", "ping")
		e.fails(ExitConflict, "already exists", append(srv, "periodic", "add", "hb", "--every", "1m", "--queue", "ops", "--kind", "ping")...)
		e.ok("periodic", "add", "hb", "--every", "1m", "--queue", "ops", "--kind", "ping", "--replace")

		for _, mode := range [][]string{nil, srv} {
			var raw []map[string]json.RawMessage
			e.json(&raw, append(mode, "periodic", "list")...)
			if len(raw) != 2 {
				t.Fatalf("list %v: %d schedules", mode, len(raw))
			}
			for _, k := range []string{"name", "schedule", "next_run_at", "last_run_at", "last_outcome", "paused"} {
				if _, ok := raw[0][k]; !ok {
					t.Errorf("list -o json: no %q in %v", k, raw[0])
				}
			}
			if out := e.ok(append(mode, "periodic", "list")...); !strings.Contains(out, "NEXT RUN") || !strings.Contains(out, "every 1m0s") {
				t.Errorf("list table: %q", out)
			}
		}

		e.json(&in, append(srv, "periodic", "pause", "hb")...)
		if !in.Paused {
			t.Fatalf("pause --server: %+v", in)
		}
		var list []backstop.ScheduleInfo
		e.json(&list, "periodic", "list")
		if !list[0].Paused || list[0].Name != "hb" {
			t.Fatalf("after pause: %+v", list)
		}
		e.json(&in, "periodic", "resume", "hb")
		if in.Paused {
			t.Fatalf("resume --db: %+v", in)
		}
		e.json(&in, "periodic", "pause", "nightly")
		e.json(&in, append(srv, "periodic", "resume", "nightly")...)
		if in.Paused {
			t.Fatalf("resume --server: %+v", in)
		}
		e.ok(append(srv, "periodic", "remove", "hb")...)
		e.fails(ExitNotFound, "not found", append(srv, "periodic", "remove", "hb")...)
		e.fails(ExitNotFound, "not found", "periodic", "remove", "hb")
		e.fails(ExitNotFound, "not found", "periodic", "pause", "hb")
		e.ok("periodic", "remove", "nightly")
		e.json(&list, append(srv, "periodic", "list")...)
		if len(list) != 0 {
			t.Fatalf("after remove: %+v", list)
		}
	})
}

// TestPeriodicBadInput: each bad add exits 2 naming its flag, on --db and
// on --server, and writes nothing; the API refuses the same (400 naming
// the field).
func TestPeriodicBadInput(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		r := newRemoteEnv(t, e, "admin")
		srv := []string{"--server", r.url, "--token", r.token}
		for _, c := range []struct {
			want string
			args []string
		}{
			{"--tz", []string{"--cron", "0 3 * * *", "--tz", "Mars/Olympus", "--queue", "q", "--kind", "k"}},
			{"--cron", []string{"--cron", "61 * * * *", "--queue", "q", "--kind", "k"}},
			{"--cron", []string{"--cron", "not cron", "--queue", "q", "--kind", "k"}},
			{"--every or --cron, not both", []string{"--every", "1m", "--cron", "* * * * *", "--queue", "q", "--kind", "k"}},
			{"--every D or --cron EXPR", []string{"--queue", "q", "--kind", "k"}},
			{"--queue", []string{"--every", "1m", "--kind", "k"}},
			{"--kind", []string{"--every", "1m", "--queue", "q"}},
			{"--missed", []string{"--every", "1m", "--queue", "q", "--kind", "k", "--missed", "never"}},
			{"--every", []string{"--every", "10ms", "--queue", "q", "--kind", "k"}},
			{"--tz applies to --cron", []string{"--every", "1m", "--tz", "UTC", "--queue", "q", "--kind", "k"}},
			{"--payload", []string{"--every", "1m", "--queue", "q", "--kind", "k", "--payload", "{nope"}},
			{"queue", []string{"--every", "1m", "--queue", "bad queue!", "--kind", "k"}},
		} {
			for _, mode := range [][]string{nil, srv} {
				e.fails(ExitUsage, c.want, append(append(mode, "periodic", "add", "s"), c.args...)...)
			}
		}
		e.fails(ExitUsage, "name", "periodic", "add", "bad name!", "--every", "1m", "--queue", "q", "--kind", "k")
		var list []backstop.ScheduleInfo
		e.json(&list, "periodic", "list")
		if len(list) != 0 {
			t.Fatalf("bad input wrote %+v", list)
		}
		_, err := apiclient.New(r.url, r.token).AddSchedule(context.Background(),
			api.ScheduleRequest{ScheduleParams: backstop.ScheduleParams{Name: "s", Cron: "0 3 * * *", TZ: "Nowhere/City", Queue: "q", Kind: "k"}})
		var p *api.Problem
		if !errors.As(err, &p) || p.Status != 400 || p.Field != "tz" {
			t.Fatalf("POST /v1/schedules with an unknown zone: %v", err)
		}
		_, err = apiclient.New(r.url, r.token).AddSchedule(context.Background(),
			api.ScheduleRequest{ScheduleParams: backstop.ScheduleParams{Name: "s", Queue: "q", Kind: "k"}, Every: "soon"})
		if !errors.As(err, &p) || p.Status != 400 || p.Field != "every" {
			t.Fatalf("POST /v1/schedules with a bad every: %v", err)
		}
	})
}
