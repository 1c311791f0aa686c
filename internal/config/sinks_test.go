package config

import (
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
)

// A sink's URL and policy: the sink queue's retry policy and max attempts,
// ordered (a message's key is its ordering key); the environment sets and
// overrides sinks.
func TestSinks(t *testing.T) {
	c, err := Parse([]byte("sinks:\n  bus:\n    url: nats://127.0.0.1:4222\n    max_attempts: 7\n    retry: {schedule: [1s, 5s]}\n    timeout: 3s\n  hook:\n    url: https://example.test/in\n    secret: s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyEnv([]string{"BACKSTOP_SINKS_LOG_URL=kafka://127.0.0.1:9092", "BACKSTOP_SINKS_BUS_TIMEOUT=4s"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Sinks["log"].URL != "kafka://127.0.0.1:9092" || c.Sinks["bus"].Timeout.D() != 4*time.Second || c.Sinks["hook"].RelayOptions().Secret != "s" {
		t.Fatalf("sinks: %+v", c.Sinks)
	}
	q := c.Library().Queues[backstop.SinkQueue("bus")]
	if q.MaxAttempts != 7 || len(q.Retry.Schedule) != 2 || !q.Ordering.Enabled {
		t.Fatalf("sink queue: %+v", q)
	}
	if !c.Library().Queues[backstop.SinkQueue("log")].Ordering.Enabled {
		t.Fatal("sink queue log is not ordered")
	}
}

func TestSinkErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"sinks:\n  bus: {}\n", "sinks.bus.url: required"},
		{"sinks:\n  bus:\n    url: amqp://x\n", "sinks.bus.url: \"amqp://x\": scheme must be one of"},
		{"sinks:\n  bus:\n    url: nats://\n", "sinks.bus.url: \"nats://\": missing host"},
		{"sinks:\n  bus:\n    url: nats://h:1\n    timeout: -1s\n", "sinks.bus.timeout: must not be negative"},
		{"sinks:\n  bus:\n    url: nats://h:1\n    max_attempts: -1\n", "sinks.bus.max_attempts"},
		{"sinks:\n  bus:\n    url: nats://h:1\n    retry: {factor: 0.5}\n", "sinks.bus.retry.factor"},
		{"sinks:\n  bus:\n    url: nats://h:1\n    urls: x\n", `unknown key "urls" in sinks.bus`},
		{"sinks:\n  'a b':\n    url: nats://h:1\n", "sinks.a b: bad sink name"},
		{"sinks:\n  bus:\n    url: nats://h:1\nqueues:\n  sink.bus: {}\n", "sinks.bus: queue sink.bus is also declared under queues"},
	} {
		c, err := Parse([]byte(tc.yaml))
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error containing %q", tc.yaml, err, tc.want)
		}
	}
	c := &Config{}
	if err := c.ApplyEnv([]string{"BACKSTOP_SINKS_BUS_URLX=x"}); err == nil || !strings.Contains(err.Error(), "BACKSTOP_SINKS_BUS_URLX") {
		t.Errorf("env: %v", err)
	}
}
