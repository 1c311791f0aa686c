package config

import (
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// TestSchedules: schedules decode from YAML (a payload of any YAML kept as
// JSON) into the library's params, replacing stored ones; each bad key is
// refused by its path.
func TestSchedules(t *testing.T) {
	c, err := Parse([]byte(`schedules:
  nightly:
    cron: "0 3 * * *"
    tz: Europe/Paris
    queue: reports
    kind: nightly
    missed: once
    payload: {region: eu, days: [1, 2]}
    attributes: {team: ops}
  heartbeat:
    every: 30s
    queue: ops
    kind: ping
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ps := c.ScheduleParams()
	if len(ps) != 2 || ps[0].Name != "heartbeat" || ps[0].Every != 30*time.Second || !ps[0].Replace ||
		ps[1].Cron != "0 3 * * *" || ps[1].TZ != "Europe/Paris" || ps[1].Missed != "once" ||
		string(ps[1].Payload) != `{"days":[1,2],"region":"eu"}` || ps[1].Attributes["team"] != "ops" {
		t.Fatalf("params: %+v", ps)
	}
	out, err := yaml.Marshal(c.Effective())
	if err != nil || !strings.Contains(string(out), "region: eu") {
		t.Fatalf("the effective configuration as YAML: %v\n%s", err, out)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"schedules:\n  s: {cron: '* * * * *', tz: Mars/Olympus, queue: q, kind: k}\n", "schedules.s.tz: unknown time zone"},
		{"schedules:\n  s: {cron: '61 * * * *', queue: q, kind: k}\n", "schedules.s.cron:"},
		{"schedules:\n  s: {every: 1m, cron: '* * * * *', queue: q, kind: k}\n", "schedules.s.every: give either"},
		{"schedules:\n  s: {queue: q, kind: k}\n", "schedules.s.every: a schedule needs"},
		{"schedules:\n  s: {every: 1m, kind: k}\n", "schedules.s.queue: is required"},
		{"schedules:\n  s: {every: 1m, queue: q}\n", "schedules.s.kind: is required"},
		{"schedules:\n  s: {every: 1m, queue: q, kind: k, missed: never}\n", "schedules.s.missed"},
		{"schedules:\n  s: {every: 1m, queue: q, kind: k, mised: all}\n", `unknown key "mised" in schedules.s`},
		{"schedules:\n  'bad name': {every: 1m, queue: q, kind: k}\n", "schedules.bad name: bad schedule name"},
	} {
		c, err := Parse([]byte(tc.yaml))
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error containing %q", tc.yaml, err, tc.want)
		}
	}
}
