package config

import (
	"strings"
	"testing"
	"time"
)

// TestDLQSection: dlq.require_reason and dlq.purge_floor from the file and
// the environment (which wins), their defaults, the library's switch, the
// gauges' policy, and errors naming the key or the variable.
func TestDLQSection(t *testing.T) {
	c, err := Parse([]byte("dlq:\n  require_reason: true\n  purge_floor: 72h\nretention:\n  dead_letters: 24h\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if !c.DLQ.RequireReason || !c.Library().RequireReason {
		t.Fatalf("require_reason: %+v", c.DLQ)
	}
	if p := c.DLQGaugePolicy(); p.Retention != 24*time.Hour || p.PurgeFloor != 72*time.Hour {
		t.Fatalf("gauge policy: %+v", p)
	}
	if err := c.ApplyEnv([]string{"BACKSTOP_DLQ_REQUIRE_REASON=false", "BACKSTOP_DLQ_PURGE_FLOOR=1h"}); err != nil {
		t.Fatal(err)
	}
	if c.DLQ.RequireReason || c.DLQ.PurgeFloor.D() != time.Hour {
		t.Fatalf("after the environment: %+v", c.DLQ)
	}

	if err := c.ApplyEnv([]string{"BACKSTOP_DLQ_REDRIVE_HEARTBEAT=250ms"}); err != nil || c.Library().RedriveHeartbeat != 250*time.Millisecond {
		t.Fatalf("redrive_heartbeat from the environment: %+v %v", c.DLQ, err)
	}

	var empty Config
	if p := empty.DLQGaugePolicy(); p.Retention != 30*24*time.Hour || p.PurgeFloor != DefaultPurgeFloor {
		t.Fatalf("defaults: %+v", p)
	}
	if e := empty.Effective(); e.DLQ.PurgeFloor.D() != DefaultPurgeFloor || e.DLQ.RequireReason || e.DLQ.RedriveHeartbeat.D() != 5*time.Second {
		t.Fatalf("effective: %+v", e.DLQ)
	}
	forever := Config{Retention: Retention{DeadLetters: Duration(-1)}}
	if p := forever.DLQGaugePolicy(); p.Retention >= 0 {
		t.Fatalf("kept forever: %+v", p)
	}

	for _, tc := range []struct{ yaml, want string }{
		{"dlq:\n  purge_floor: -1h\n", "dlq.purge_floor: must not be negative"},
		{"dlq:\n  redrive_heartbeat: -1s\n", "dlq.redrive_heartbeat: must not be negative"},
		{"dlq:\n  require_reasons: true\n", `unknown key "require_reasons" in dlq`},
	} {
		c, err := Parse([]byte(tc.yaml))
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
	for _, env := range []string{"BACKSTOP_DLQ_REQUIRE_REASON=maybe", "BACKSTOP_DLQ_PURGE_FLOOR=soon", "BACKSTOP_DLQ_REDRIVE_HEARTBEAT=soon", "BACKSTOP_DLQ_BOGUS=1"} {
		var c Config
		name, _, _ := strings.Cut(env, "=")
		if err := c.ApplyEnv([]string{env}); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want an error naming it", env, err)
		}
	}
}
