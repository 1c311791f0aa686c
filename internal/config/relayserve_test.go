package config

import (
	"strings"
	"testing"
	"time"
)

// The relay: and ingest: sections `serve` runs: read from the file, the
// relay's settings also from BACKSTOP_RELAY_*; each entry's defaults.
func TestRelayAndIngestSections(t *testing.T) {
	c, err := Parse([]byte(`sinks:
  bus: {url: "nats://127.0.0.1:4222"}
  hook: {url: "https://example.test/in"}
relay:
  sinks: [bus]
  streams: [queue.emails]
  concurrency: 4
ingest:
  - from: kafka://127.0.0.1:9092
    topic: uptime
    queue: results
    kind: check
    id_field: check.id
    ordering_key_field: check.subscription
    sequence_field: check.minute
  - {from: "nats://127.0.0.1:4222", subject: orders.created, queue: orders, kind: created, elect: false, ack_wait: 5s}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyEnv([]string{"BACKSTOP_RELAY_SINKS=bus,hook", "BACKSTOP_RELAY_STREAMS_SINK=hook", "BACKSTOP_RELAY_LEASE=10s"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.RelaySinks(), ","); got != "bus,hook" || c.Relay.StreamsSink != "hook" || c.Relay.Lease.D() != 10*time.Second || c.Relay.Concurrency != 4 {
		t.Fatalf("relay: %+v", c.Relay)
	}
	if len(c.Ingest) != 2 || !c.Ingest[0].Elected() || c.Ingest[1].Elected() {
		t.Fatalf("ingest: %+v", c.Ingest)
	}
	s0, s1 := c.Ingest[0].Spec(), c.Ingest[1].Spec()
	if s0.Batch != 500 || s0.AckWait != 30*time.Second || s1.AckWait != 5*time.Second || s1.Subject != "orders.created" {
		t.Fatalf("specs: %+v %+v", s0, s1)
	}
	c.Relay = Relay{Sinks: []string{"all"}}
	if got := strings.Join(c.RelaySinks(), ","); got != "bus,hook" {
		t.Fatalf("all: %s", got)
	}
}

func TestRelayAndIngestErrorsNameTheKey(t *testing.T) {
	const sinks = "sinks:\n  bus: {url: \"nats://h:1\"}\n  hook: {url: \"https://h/in\"}\n"
	for _, tc := range []struct{ yaml, want string }{
		{sinks + "relay: {sinks: [nope]}\n", `relay.sinks[0]: "nope": no such sink under sinks:`},
		{sinks + "relay: {sinks: [bus, bus]}\n", `relay.sinks[1]: "bus" is given twice`},
		{sinks + "relay: {sinks: [bus, all]}\n", "relay.sinks[1]: all stands alone"},
		{sinks + "relay: {sinks: [bus], concurrency: -1}\n", "relay.concurrency: must be positive"},
		{sinks + "relay: {sinks: [bus], lease: 10ms}\n", "relay.lease: must be at least 1s"},
		{sinks + "relay: {sinks: [bus], streams: [nope.x]}\n", "relay.streams:"},
		{sinks + "relay: {sinks: [bus], streams: [all, queue.q]}\n", "relay.streams:"},
		{sinks + "relay: {sinks: [bus, hook], streams: [all]}\n", "relay.streams_sink: which sink receives the events?"},
		{sinks + "relay: {sinks: [bus], streams: [all], streams_sink: hook}\n", `relay.streams_sink: "hook": not one of relay.sinks`},
		{sinks + "relay: {sinks: [bus], streams: [all], streams_topic: 'a.{type}.b'}\n", "relay.streams_topic:"},
		{sinks + "relay: {sinks: [bus], streams: [all], from: middle}\n", "relay.from:"},
		{sinks + "relay: {sinks: [bus], from: end}\n", "relay.from:"},
		{sinks + "relay: {streams: [all]}\n", "relay.streams: needs relay.sinks"},
		{sinks + "relay: {sinks: [bus], checkpoint: c}\n", "relay.checkpoint: needs relay.streams"},
		{sinks + "relay: {sinkz: [bus]}\n", `unknown key "sinkz" in relay`},
		{"ingest:\n  - {topic: t, queue: q, kind: k}\n", "ingest[0].from is required"},
		{"ingest:\n  - {from: 'kafka://h:1', queue: q, kind: k}\n", "ingest[0].topic is required with a kafka:// source"},
		{"ingest:\n  - {from: 'nats://h:1', topic: t, queue: q, kind: k}\n", "ingest[0].topic is for kafka:// sources; a nats:// source reads ingest[0].subject"},
		{"ingest:\n  - {from: 'amqp://h:1', topic: t, queue: q, kind: k}\n", "ingest[0].from \"amqp://h:1\": scheme must be kafka:// or nats://"},
		{"ingest:\n  - {from: 'kafka://h:1', topic: t, kind: k}\n", "ingest[0].queue is required"},
		{"ingest:\n  - {from: 'kafka://h:1', topic: t, queue: q, kind: k}\n  - {from: 'kafka://h:1', topic: t, queue: q}\n", "ingest[1].kind is required"},
		{"ingest:\n  - {from: 'kafka://h:1', topic: t, queue: q, kind: k, id_field: 'a..b'}\n", "ingest[0].id_field:"},
		{"ingest:\n  - {from: 'kafka://h:1', topic: t, queue: q, kind: k, sequence_field: s}\n", "ingest[0].ordering_key_field and ingest[0].sequence_field go together"},
		{"ingest:\n  - {from: 'kafka://h:1', topic: t, queue: q, kind: k, id_field: a, id_header: h}\n", "give ingest[0].id_field or ingest[0].id_header, not both"},
		{"ingest:\n  - {from: 'nats://h:1', subject: s, queue: q, kind: k, group: 'a.b'}\n", "ingest[0].group \"a.b\": a JetStream durable name"},
		{"ingest:\n  - {from: 'nats://h:1', subject: s, queue: q, kind: k, ack_wait: 10ms}\n", "ingest[0].ack_wait must be at least 1s"},
		{"ingest:\n  - {from: 'kafka://h:1', topic: t, queue: q, kind: k, batch: 20000}\n", "ingest[0].batch 20000: want 1 to 10000"},
		{"ingest:\n  - {from: 'kafka://h:1', topic: t, queue: q, kind: k, topics: x}\n", `unknown key "topics" in ingest[0]`},
		{"ingest: {from: 'kafka://h:1'}\n", "ingest: want a list"},
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
	if err := c.ApplyEnv([]string{"BACKSTOP_RELAY_SINKZ=x"}); err == nil || !strings.Contains(err.Error(), "BACKSTOP_RELAY_SINKZ") {
		t.Errorf("env: %v", err)
	}
}
