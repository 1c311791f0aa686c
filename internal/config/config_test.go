package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/ingest"
)

func TestExampleFile(t *testing.T) {
	b, err := os.ReadFile("../../deploy/backstop.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Queues["emails"].Concurrency != 20 || len(c.Queues["emails"].Retry.Schedule) != 3 || c.Kinds["send_digest"].MergeRule != "append" ||
		len(c.Workers.Run) != 1 || c.Workers.Run[0].Command[0] != "sh" || c.Retention.DeadLetters.D() != 720*time.Hour {
		t.Fatalf("example decoded wrongly: %+v", c)
	}
	lib := c.Library()
	if lib.Queues["emails"].Timeout != 30*time.Second || lib.Kinds["send_digest"].Retry.Factor != 3 {
		t.Fatalf("library config: %+v", lib)
	}
}

func TestErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"queues:\n  emails:\n    concurency: 3\n", `unknown key "concurency" in queues.emails`},
		{"queues:\n  emails:\n    concurency: 3\n", `did you mean "concurrency"`},
		{"bogus: 1\n", `unknown key "bogus" in the top level`},
		{"queues:\n  emails:\n    concurrency: -1\n", "queues.emails.concurrency: must be positive"},
		{"queues:\n  emails:\n    concurrency: lots\n", `queues.emails.concurrency: "lots" is not an integer`},
		{"queues:\n  emails:\n    timeout: soon\n", `queues.emails.timeout: "soon" is not a duration`},
		{"queues:\n  emails:\n    lease: 10ms\n", "queues.emails.lease: must be at least 1s"},
		{"queues:\n  emails:\n    retry: {schedule: [1s], base: 2s}\n", "queues.emails.retry: give either schedule or base/factor/max"},
		{"queues:\n  emails:\n    retry: {factor: 0.5}\n", "queues.emails.retry.factor: must be at least 1"},
		{"queues:\n  'bad name':\n    concurrency: 1\n", "queues.bad name: bad queue name"},
		{"queues:\n  q:\n    complexity: {max_complexity: -1}\n", "queues.q.complexity.max_complexity: must not be negative"},
		{"queues:\n  q:\n    complexity: {route_to: q}\n", "queues.q.complexity.route_to: names the queue itself"},
		{"queues:\n  q:\n    complexity: {max_payload: 3}\n", `unknown key "max_payload" in queues.q.complexity`},
		{"queues:\n  q:\n    ordering: {enabled: true, step: -1}\n", "queues.q.ordering.step: must not be negative"},
		{"queues:\n  q:\n    ordering: {backoff: [10s, 0s]}\n", "queues.q.ordering.backoff[1]: must be positive"},
		{"queues:\n  q:\n    ordering: {circuit_breaker: -1}\n", "queues.q.ordering.circuit_breaker: must not be negative"},
		{"queues:\n  q:\n    ordering: {key_ttl: -1m}\n", "queues.q.ordering.key_ttl: must not be negative"},
		{"queues:\n  q:\n    ordering: {first_hold: -1s}\n", "queues.q.ordering.first_hold: must not be negative"},
		{"queues:\n  q:\n    ordering: {enabled: true, late: later}\n", "queues.q.ordering.late: must be cancel or run"},
		{"queues:\n  q:\n    ordering: {enabled: true, step: 1, late: run}\n", "queues.q.ordering.late: run needs step 0"},
		{"queues:\n  q:\n    ordering: {enabled_for: {percent: 10}}\n", "queues.q.ordering.enabled_for: needs ordering.enabled: true"},
		{"queues:\n  q:\n    ordering: {enabled: true, enabled_for: {percent: 101}}\n", "queues.q.ordering.enabled_for.percent: must be between 0 and 100"},
		{"queues:\n  q:\n    ordering: {enabled: true, enabled_for: {attribute: org_id}}\n", "queues.q.ordering.enabled_for: attribute and values go together"},
		{"queues:\n  q:\n    ordering: {enabled: true, enabled_for: {}}\n", "queues.q.ordering.enabled_for: selects nothing"},
		{"queues:\n  q:\n    ordering: {enable: true}\n", `unknown key "enable" in queues.q.ordering`},
		{"kinds:\n  k:\n    merge_rule: sum\n", `kinds.k.merge_rule: "sum": want replace or append`},
		{"kinds:\n  k:\n    max_attempts: -2\n", "kinds.k.max_attempts: must be positive"},
		{"kinds:\n  k:\n    max_attempts: 1000000000000\n", "kinds.k.max_attempts: 1000000000000: at most 1000000"},
		{"max_attempts: 1000001\n", "max_attempts: 1000001: at most 1000000"},
		{"queues:\n  q:\n    max_attempts: 1000000000000\n", "queues.q.max_attempts"},
		{"queues:\n  q:\n    retry: {base: 1h, max: 1m}\n", "queues.q.retry.base: 1h0m0s is greater than max 1m0s"},
		{"retry: {base: 2h}\n", "retry.base: 2h0m0s is greater than max 1h0m0s"},
		{"limits:\n  max_payload_size: -1\n", "limits.max_payload_size: must not be negative"},
		{"limits:\n  max_fanout_bytes: -1\n", "limits.max_fanout_bytes: must not be negative"},
		{"limits:\n  strict_queues: maybe\n", `limits.strict_queues: "maybe" is not true or false`},
		{"addr: nowhere\n", `addr: "nowhere": want host:port`},
		{"db: mysql://x\n", `db: "mysql://x"`},
		{"leader_ttl: 1ms\n", "leader_ttl: must be at least 100ms"},
		{"telemetry:\n  otlp_endpoint: nope\n", "telemetry.otlp_endpoint"},
		{"redaction:\n  keys: ['']\n", "redaction.keys[0]: must not be empty"},
		{"allowed_hosts: ['http://backstop.example.com']\n", `allowed_hosts[0]: "http://backstop.example.com": want a host name`},
		{"allowed_hosts: [ok.example.com, 'evil.com:8080']\n", `allowed_hosts[1]: "evil.com:8080"`},
		{"workers:\n  - queue: q\n", "workers[0].command: is required"},
		{"workers:\n  - command: [x]\n", "workers[0].queue: is required"},
		{"workers:\n  - queue: q\n    command: [x]\n    permanent_exit_codes: [75]\n", "workers[0].permanent_exit_codes[0]"},
		{"workers:\n  - queue: q\n    comand: [x]\n", `unknown key "comand" in workers[0]`},
		{"queues: [a, b]\n", "queues: want a mapping"},
		{"retention:\n  succeeded: [1]\n", "retention.succeeded"},
		{"a: 1\n---\nb: 2\n", "more than one YAML document"},
		{"db: x\ndb: y\n", "db"},
		{"queues:\n  q:\n    limits:\n      heavy: {concurrency: 0}\n", "queues.q.limits.heavy.concurrency"},
		{"queues:\n  q:\n    limits:\n      heavy: {per: 'a b', concurrency: 2}\n", "queues.q.limits.heavy.per"},
		{"queues:\n  q:\n    limits:\n      'bad name!': {concurrency: 2}\n", "queues.q.limits.bad name!: bad limit name"},
		{"queues:\n  q:\n    limits:\n      heavy: {concurency: 2}\n", `unknown key "concurency"`},
		{"queues:\n  q:\n    limits:\n      mail: {rate: -1}\n", "queues.q.limits.mail.rate"},
		{"queues:\n  q:\n    limits:\n      mail: {rate: 10, burst: -1}\n", "queues.q.limits.mail.burst"},
		{"queues:\n  q:\n    limits:\n      mail: {rate: 10, concurrency: 2}\n", "queues.q.limits.mail.rate: a limit is a concurrency limit or a rate limit"},
		{"queues:\n  q:\n    limits:\n      mail: {burst: 3}\n", "queues.q.limits.mail.rate"},
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

func TestEmptyFileIsDefaults(t *testing.T) {
	for _, s := range []string{"", "# nothing\n", "{}\n"} {
		c, err := Parse([]byte(s))
		if err != nil || c.Validate() != nil {
			t.Fatalf("%q: %v", s, err)
		}
		e := c.Effective()
		if e.DB != DefaultDB || e.Addr != DefaultAddr || e.LeaderTTL.D() != DefaultLeaderTTL || e.MaxAttempts != 25 {
			t.Fatalf("%q: defaults: %+v", s, e)
		}
	}
}

func TestEnvOverrides(t *testing.T) {
	c, err := Parse([]byte("db: sqlite://file.db\nqueues:\n  bulk-emails:\n    concurrency: 3\n    max_attempts: 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = c.ApplyEnv([]string{
		"BACKSTOP_DB=postgres://h/db",
		"BACKSTOP_ADDR=127.0.0.1:9999",
		"BACKSTOP_DEV=true",
		"BACKSTOP_LEADER_TTL=3s",
		"BACKSTOP_QUEUES_BULK_EMAILS_CONCURRENCY=7",
		"BACKSTOP_QUEUES_BULK_EMAILS_RETRY=1s,2s",
		"BACKSTOP_QUEUES_FRESH_MAX_ATTEMPTS=9",
		"BACKSTOP_QUEUES_FRESH_TIMEOUT=1m",
		"BACKSTOP_QUEUES_FRESH_LEASE=2m",
		"BACKSTOP_KINDS_SEND_DIGEST_MERGE_RULE=append",
		"BACKSTOP_KINDS_SEND_DIGEST_RETRY=base=2s,factor=3,max=1h,jitter=false",
		"BACKSTOP_LIMITS_STRICT_QUEUES=1",
		"BACKSTOP_RETENTION_DEAD_LETTERS=48h",
		"BACKSTOP_REDACTION_KEYS=password, ssn",
		"BACKSTOP_ALLOWED_HOSTS=backstop.internal, ::1",
		"BACKSTOP_SERVER=http://ignored", // not configuration
		"BACKSTOP_TASK_ID=x",             // not configuration
		"BACKSTOP_MAX_ATTEMPTS=",         // empty: unset
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	q := c.Queues["bulk-emails"]
	if c.DB != "postgres://h/db" || c.Addr != "127.0.0.1:9999" || !c.Dev || c.LeaderTTL.D() != 3*time.Second ||
		q.Concurrency != 7 || q.MaxAttempts != 4 || len(q.Retry.Schedule) != 2 {
		t.Fatalf("overrides: %+v %+v", c, q)
	}
	f := c.Queues["fresh"]
	if f.MaxAttempts != 9 || f.Timeout.D() != time.Minute || f.Lease.D() != 2*time.Minute {
		t.Fatalf("new queue from env: %+v", f)
	}
	k := c.Kinds["send_digest"]
	if k.MergeRule != "append" || k.Retry.Factor != 3 || k.Retry.Jitter == nil || *k.Retry.Jitter {
		t.Fatalf("kind from env: %+v", k)
	}
	if !c.Limits.StrictQueues || c.Retention.DeadLetters.D() != 48*time.Hour || len(c.Redaction.Keys) != 2 || c.MaxAttempts != 0 ||
		strings.Join(c.AllowedHosts, ",") != "backstop.internal,::1" {
		t.Fatalf("sections: %+v", c)
	}
}

func TestEnvErrorsNameTheVariable(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"BACKSTOP_QUEUES_EMAILS_CONCURRENCY=many", `BACKSTOP_QUEUES_EMAILS_CONCURRENCY: "many" is not an integer`},
		{"BACKSTOP_QUEUES_EMAILS_SPEED=1", "BACKSTOP_QUEUES_EMAILS_SPEED: unknown queue setting"},
		{"BACKSTOP_LIMITS_NOPE=1", "BACKSTOP_LIMITS_NOPE: unknown configuration variable"},
		{"BACKSTOP_LEADER_TTL=soon", `BACKSTOP_LEADER_TTL: "soon" is not a duration`},
		{"BACKSTOP_KINDS_K_RETRY=base=1s,speed=2", "BACKSTOP_KINDS_K_RETRY: retry: unknown setting"},
		{"BACKSTOP_DEV=perhaps", "BACKSTOP_DEV"},
	} {
		c := &Config{}
		err := c.ApplyEnv([]string{tc.env})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.env, err, tc.want)
		}
	}
	// Values set through the environment are validated like the file's.
	c := &Config{}
	if err := c.ApplyEnv([]string{"BACKSTOP_QUEUES_EMAILS_CONCURRENCY=-3"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "queues.emails.concurrency: must be positive") {
		t.Fatalf("got %v", err)
	}
}

func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile("../../deploy/backstop.example.yaml"); err == nil {
		f.Add(string(b))
	}
	for _, s := range []string{"", "queues:\n  a:\n    concurrency: 1\n", "a: &x [*x]\n", "workers: [{queue: q, command: [a]}]",
		"retry: {schedule: [1s, -1s]}", "kinds: {k: {retry: null}}", "queues: {q: ~}", "!!binary x", "[1, 2]", "? [a]\n: b\n",
		"sinks: {bus: {url: 'nats://h:1'}}\nrelay: {sinks: [all], streams: [queue.q], checkpoint: c}\n",
		"ingest: [{from: 'kafka://h:1', topic: t, queue: q, kind: k, ordering_key_field: a.b, sequence_field: 'c[0]'}]",
		"ingest: [{from: 'nats://h:1', subject: s, queue: q, kind: k, elect: false, ack_wait: 2s}]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Parse([]byte(s))
		if err != nil {
			return
		}
		if c.Validate() == nil {
			_ = c.Library()
			_ = c.Effective()
			_ = c.RelaySinks()
			for i, in := range c.Ingest {
				spec := in.Spec()
				if _, err := spec.Mapping(ingest.FlagName); err != nil {
					t.Fatalf("ingest[%d] validated, then refused: %v", i, err)
				}
			}
		}
	})
}

func TestOrderingSettings(t *testing.T) {
	c, err := Parse([]byte("queues:\n  results:\n    ordering:\n      enabled: true\n      step: 60000\n      backoff: [5s, 15s]\n      circuit_breaker: 4\n      key_ttl: 2h\n      first_hold: 90s\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := c.Library().Queues["results"].Ordering
	want := backstop.OrderingConfig{Enabled: true, Step: 60000, Backoff: []time.Duration{5 * time.Second, 15 * time.Second},
		CircuitBreaker: 4, KeyTTL: 2 * time.Hour, FirstHold: 90 * time.Second}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ordering: got %+v, want %+v", got, want)
	}
	if err := c.ApplyEnv([]string{"BACKSTOP_QUEUES_RESULTS_ORDERING_STEP=5", "BACKSTOP_QUEUES_RESULTS_ORDERING_BACKOFF=1s, 2s",
		"BACKSTOP_QUEUES_RESULTS_ORDERING_CIRCUIT_BREAKER=3", "BACKSTOP_QUEUES_RESULTS_ORDERING_KEY_TTL=1m", "BACKSTOP_QUEUES_RESULTS_ORDERING_FIRST_HOLD=2m"}); err != nil {
		t.Fatal(err)
	}
	got = c.Library().Queues["results"].Ordering
	want = backstop.OrderingConfig{Enabled: true, Step: 5, Backoff: []time.Duration{time.Second, 2 * time.Second},
		CircuitBreaker: 3, KeyTTL: time.Minute, FirstHold: 2 * time.Minute}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ordering after env: got %+v, want %+v", got, want)
	}
	// The rollout: in the file, then the environment's keys.
	c, err = Parse([]byte("queues:\n  results:\n    ordering:\n      enabled: true\n      enabled_for: {attribute: org_id, values: [acme], percent: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Library().Queues["results"].Ordering.EnabledFor; r == nil || r.Attribute != "org_id" || !reflect.DeepEqual(r.Values, []string{"acme"}) || r.Percent != 5 {
		t.Fatalf("enabled_for from the file: %+v", r)
	}
	if err := c.ApplyEnv([]string{"BACKSTOP_QUEUES_RESULTS_ORDERING_ENABLED_FOR_VALUES=acme, globex", "BACKSTOP_QUEUES_RESULTS_ORDERING_ENABLED_FOR_PERCENT=12.5"}); err != nil {
		t.Fatal(err)
	}
	if r := c.Library().Queues["results"].Ordering.EnabledFor; r == nil || r.Attribute != "org_id" || !reflect.DeepEqual(r.Values, []string{"acme", "globex"}) || r.Percent != 12.5 {
		t.Fatalf("enabled_for after env: %+v", r)
	}
	if err := c.ApplyEnv([]string{"BACKSTOP_QUEUES_RESULTS_ORDERING_ENABLED_FOR_PERCENT=lots"}); err == nil {
		t.Fatal("a percent that is not a number was accepted")
	}
}

func TestQueueLimits(t *testing.T) {
	c, err := Parse([]byte("queues:\n  billing:\n    limits:\n      heavy5: {kind: charge, per: tenant, concurrency: 5}\n      all: {concurrency: 50}\n" +
		"      mail: {rate: 2.5, burst: 10, per: tenant}\n"))
	if err != nil || c.Validate() != nil {
		t.Fatalf("parse: %v", err)
	}
	got := c.ConcurrencyLimits()
	want := []backstop.Limit{{Name: "all", Queue: "billing", Concurrency: 50},
		{Name: "heavy5", Queue: "billing", Kind: "charge", Per: "tenant", Concurrency: 5},
		{Name: "mail", Queue: "billing", Per: "tenant", Rate: 2.5, Burst: 10}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("limits: %+v, want %+v", got, want)
	}
}

func TestQueueFair(t *testing.T) {
	c, err := Parse([]byte("queues:\n  crm:\n    fair: {by: tenant, weights: {acme: 3}}\n  plain: {}\n"))
	if err != nil || c.Validate() != nil {
		t.Fatalf("parse: %v", err)
	}
	want := []backstop.FairQueue{{Queue: "crm", By: "tenant", Weights: map[string]int{"acme": 3}}}
	if got := c.FairQueues(); !reflect.DeepEqual(got, want) {
		t.Fatalf("fair queues: %+v, want %+v", got, want)
	}
	for yaml, key := range map[string]string{
		"queues:\n  crm:\n    fair: {by: 'bad key'}\n":                  "queues.crm.fair.by",
		"queues:\n  crm:\n    fair: {by: tenant, weights: {acme: 0}}\n": "queues.crm.fair.weights",
	} {
		c, err := Parse([]byte(yaml))
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%q: %v, want an error naming %s", yaml, err, key)
		}
	}
}
