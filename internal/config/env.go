package config

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// EnvPrefix starts every configuration variable.
const EnvPrefix = "BACKSTOP_"

// The environment scheme (docs/configuration.md): a key path upper-cased,
// its dots as '_', after BACKSTOP_. Queue and kind names appear as EnvName
// (upper case, other characters than letters and digits as '_'); the
// field is matched from the end, so names may contain '_'.
//
//	BACKSTOP_DB, BACKSTOP_ADDR, BACKSTOP_DEV, BACKSTOP_LEADER_TTL, ...
//	BACKSTOP_LIMITS_MAX_PAYLOAD_SIZE, BACKSTOP_RETENTION_DEAD_LETTERS, ...
//	BACKSTOP_QUEUES_<NAME>_CONCURRENCY|MAX_ATTEMPTS|TIMEOUT|LEASE|RETRY|COMPLEXITY_*
//	BACKSTOP_KINDS_<NAME>_MERGE_RULE|MAX_ATTEMPTS|TIMEOUT|RETRY
//	BACKSTOP_SINKS_<NAME>_URL|MAX_ATTEMPTS|TIMEOUT|RETRY|SECRET|STREAM
//	BACKSTOP_RELAY_SINKS|CONCURRENCY|LEASE|STREAMS|STREAMS_SINK|CHECKPOINT|STREAMS_TOPIC
//
// A retry value is a schedule ("1s,5s,30s") or "base=1s,factor=2,max=1h"
// (optionally ",jitter=false"). Empty variables count as unset. Other
// BACKSTOP_* variables (BACKSTOP_SERVER, BACKSTOP_TOKEN, the task variables
// of exec workers) are not configuration and are left alone, but an unknown
// variable under a configuration section (BACKSTOP_QUEUES_*, BACKSTOP_KINDS_*,
// BACKSTOP_LIMITS_*, BACKSTOP_RETENTION_*, BACKSTOP_REDACTION_*,
// BACKSTOP_TELEMETRY_*, BACKSTOP_DLQ_*, BACKSTOP_WORKERS_*, BACKSTOP_LOG_*,
// BACKSTOP_RELAY_*, BACKSTOP_SINKS_*) is an error. The ingest: list has no variables.

type setter func(c *Config, v string) error

var topEnv = map[string]setter{
	"DB":                   func(c *Config, v string) error { c.DB = v; return nil },
	"ADDR":                 func(c *Config, v string) error { c.Addr = v; return nil },
	"DEV":                  func(c *Config, v string) error { return parseBool(v, &c.Dev) },
	"ALLOWED_HOSTS":        func(c *Config, v string) error { c.AllowedHosts = splitList(v); return nil },
	"LEADER_TTL":           func(c *Config, v string) error { return parseDur(v, &c.LeaderTTL) },
	"MAINTENANCE_INTERVAL": func(c *Config, v string) error { return parseDur(v, &c.MaintenanceInterval) },
	"MAX_ATTEMPTS":         func(c *Config, v string) error { return parseInt(v, &c.MaxAttempts) },
	"RETRY":                func(c *Config, v string) error { return parseRetry(v, &c.Retry) },
	"LIMITS_INLINE_PAYLOAD_LIMIT": func(c *Config, v string) error {
		return parseInt(v, &c.Limits.InlinePayloadLimit)
	},
	"LIMITS_MAX_PAYLOAD_SIZE": func(c *Config, v string) error { return parseInt(v, &c.Limits.MaxPayloadSize) },
	"LIMITS_MAX_FANOUT_BYTES": func(c *Config, v string) error { return parseInt(v, &c.Limits.MaxFanOutBytes) },
	"LIMITS_STRICT_QUEUES":    func(c *Config, v string) error { return parseBool(v, &c.Limits.StrictQueues) },
	"LIMITS_WHERE_COST":       func(c *Config, v string) error { return parseInt(v, &c.Limits.WhereCost) },
	"LIMITS_WHERE_TIME":       func(c *Config, v string) error { return parseDur(v, &c.Limits.WhereTime) },
	"RETENTION_SUCCEEDED":     func(c *Config, v string) error { return parseDur(v, &c.Retention.Succeeded) },
	"RETENTION_CANCELED":      func(c *Config, v string) error { return parseDur(v, &c.Retention.Canceled) },
	"RETENTION_DEAD_LETTERS":  func(c *Config, v string) error { return parseDur(v, &c.Retention.DeadLetters) },
	"RETENTION_INTERVAL":      func(c *Config, v string) error { return parseDur(v, &c.Retention.Interval) },
	"RETENTION_EVENTS":        func(c *Config, v string) error { return parseDur(v, &c.Retention.Events) },
	"RETENTION_RUNS":          func(c *Config, v string) error { return parseDur(v, &c.Retention.Runs) },
	"TELEMETRY_OTLP_ENDPOINT": func(c *Config, v string) error { c.Telemetry.OTLPEndpoint = v; return nil },
	"TELEMETRY_SAMPLE_RATIO":  func(c *Config, v string) error { return parseRatio(v, &c.Telemetry.SampleRatio) },
	"TELEMETRY_METRICS": func(c *Config, v string) error {
		var b bool
		c.Telemetry.Metrics = &b
		return parseBool(v, &b)
	},
	"REDACTION_KEYS":        func(c *Config, v string) error { c.Redaction.Keys = splitList(v); return nil },
	"DLQ_REQUIRE_REASON":    func(c *Config, v string) error { return parseBool(v, &c.DLQ.RequireReason) },
	"DLQ_PURGE_FLOOR":       func(c *Config, v string) error { return parseDur(v, &c.DLQ.PurgeFloor) },
	"DLQ_REDRIVE_HEARTBEAT": func(c *Config, v string) error { return parseDur(v, &c.DLQ.RedriveHeartbeat) },
	"WORKERS_STALE_AFTER":   func(c *Config, v string) error { return parseDur(v, &c.Workers.StaleAfter) },
	"RELAY_SINKS":           func(c *Config, v string) error { c.Relay.Sinks = splitList(v); return nil },
	"RELAY_CONCURRENCY":     func(c *Config, v string) error { return parseInt(v, &c.Relay.Concurrency) },
	"RELAY_LEASE":           func(c *Config, v string) error { return parseDur(v, &c.Relay.Lease) },
	"RELAY_STREAMS":         func(c *Config, v string) error { c.Relay.Streams = splitList(v); return nil },
	"RELAY_STREAMS_SINK":    func(c *Config, v string) error { c.Relay.StreamsSink = v; return nil },
	"RELAY_CHECKPOINT":      func(c *Config, v string) error { c.Relay.Checkpoint = v; return nil },
	"RELAY_STREAMS_TOPIC":   func(c *Config, v string) error { c.Relay.StreamsTopic = v; return nil },
	"RELAY_FROM":            func(c *Config, v string) error { c.Relay.From = v; return nil },
	"LOG_LEVEL": func(c *Config, v string) error {
		if _, err := ParseLogLevel(v); err != nil {
			return err
		}
		c.Log.Level = v
		return nil
	},
}

var queueEnv = map[string]func(q *Queue, v string) error{
	"CONCURRENCY":  func(q *Queue, v string) error { return parseInt(v, &q.Concurrency) },
	"MAX_ATTEMPTS": func(q *Queue, v string) error { return parseInt(v, &q.MaxAttempts) },
	"TIMEOUT":      func(q *Queue, v string) error { return parseDur(v, &q.Timeout) },
	"LEASE":        func(q *Queue, v string) error { return parseDur(v, &q.Lease) },
	"RETRY":        func(q *Queue, v string) error { return parseRetry(v, &q.Retry) },
	"COMPLEXITY_MAX_COMPLEXITY": func(q *Queue, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", v)
		}
		q.Complexity.MaxComplexity = f
		return nil
	},
	"COMPLEXITY_MAX_PAYLOAD_BYTES": func(q *Queue, v string) error { return parseInt(v, &q.Complexity.MaxPayloadBytes) },
	"COMPLEXITY_ROUTE_TO":          func(q *Queue, v string) error { q.Complexity.RouteTo = v; return nil },
	"ORDERING_ENABLED":             func(q *Queue, v string) error { return parseBool(v, &q.Ordering.Enabled) },
	"ORDERING_STEP": func(q *Queue, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
		q.Ordering.Step = n
		return nil
	},
	"ORDERING_BACKOFF": func(q *Queue, v string) error {
		q.Ordering.Backoff = nil
		for _, part := range strings.Split(v, ",") {
			var d Duration
			if err := parseDur(strings.TrimSpace(part), &d); err != nil {
				return err
			}
			q.Ordering.Backoff = append(q.Ordering.Backoff, d)
		}
		return nil
	},
	"ORDERING_CIRCUIT_BREAKER": func(q *Queue, v string) error { return parseInt(v, &q.Ordering.CircuitBreaker) },
	"ORDERING_KEY_TTL":         func(q *Queue, v string) error { return parseDur(v, &q.Ordering.KeyTTL) },
	"ORDERING_FIRST_HOLD":      func(q *Queue, v string) error { return parseDur(v, &q.Ordering.FirstHold) },
	"ORDERING_LATE":            func(q *Queue, v string) error { q.Ordering.Late = v; return nil },
	"ORDERING_ENABLED_FOR_ATTRIBUTE": func(q *Queue, v string) error {
		rolloutOf(q).Attribute = v
		return nil
	},
	"ORDERING_ENABLED_FOR_VALUES": func(q *Queue, v string) error {
		r := rolloutOf(q)
		r.Values = nil
		for _, part := range strings.Split(v, ",") {
			if part = strings.TrimSpace(part); part != "" {
				r.Values = append(r.Values, part)
			}
		}
		return nil
	},
	"ORDERING_ENABLED_FOR_PERCENT": func(q *Queue, v string) error {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", v)
		}
		rolloutOf(q).Percent = f
		return nil
	},
}

// rolloutOf is q's ordering rollout, made when the environment sets one
// of its keys.
func rolloutOf(q *Queue) *OrderingRollout {
	if q.Ordering.EnabledFor == nil {
		q.Ordering.EnabledFor = &OrderingRollout{}
	}
	return q.Ordering.EnabledFor
}

var kindEnv = map[string]func(k *Kind, v string) error{
	"MERGE_RULE":   func(k *Kind, v string) error { k.MergeRule = v; return nil },
	"MAX_ATTEMPTS": func(k *Kind, v string) error { return parseInt(v, &k.MaxAttempts) },
	"TIMEOUT":      func(k *Kind, v string) error { return parseDur(v, &k.Timeout) },
	"RETRY":        func(k *Kind, v string) error { return parseRetry(v, &k.Retry) },
}

var sinkEnv = map[string]func(s *Sink, v string) error{
	"URL":          func(s *Sink, v string) error { s.URL = v; return nil },
	"MAX_ATTEMPTS": func(s *Sink, v string) error { return parseInt(v, &s.MaxAttempts) },
	"TIMEOUT":      func(s *Sink, v string) error { return parseDur(v, &s.Timeout) },
	"RETRY":        func(s *Sink, v string) error { return parseRetry(v, &s.Retry) },
	"SECRET":       func(s *Sink, v string) error { s.Secret = v; return nil },
	"STREAM":       func(s *Sink, v string) error { s.Stream = v; return nil },
}

func sinkEnvApply(c *Config) namedApply {
	return namedApply{fields: keys(sinkEnv), names: keys(c.Sinks), set: func(name, field, v string) error {
		if c.Sinks == nil {
			c.Sinks = map[string]Sink{}
		}
		s := c.Sinks[name]
		err := sinkEnv[field](&s, v)
		c.Sinks[name] = s
		return err
	}}
}

var strictSections = []string{"RELAY_", "SINKS_", "QUEUES_", "KINDS_", "LIMITS_", "RETENTION_", "REDACTION_", "TELEMETRY_", "DLQ_", "WORKERS_", "LOG_"}

// ApplyEnv applies the BACKSTOP_* variables of environ (os.Environ form) over
// c. Errors name the variable.
func (c *Config) ApplyEnv(environ []string) error {
	var errs []error
	vars := slices.Clone(environ)
	slices.Sort(vars) // deterministic order
	for _, kv := range vars {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || val == "" {
			continue
		}
		rest, ok := strings.CutPrefix(name, EnvPrefix)
		if !ok {
			continue
		}
		var err error
		switch {
		case topEnv[rest] != nil:
			err = topEnv[rest](c, val)
		case strings.HasPrefix(rest, "QUEUES_"):
			err = c.applyNamed(strings.TrimPrefix(rest, "QUEUES_"), val, "queue", queueEnvApply(c))
		case strings.HasPrefix(rest, "SINKS_"):
			err = c.applyNamed(strings.TrimPrefix(rest, "SINKS_"), val, "sink", sinkEnvApply(c))
		case strings.HasPrefix(rest, "KINDS_"):
			err = c.applyNamed(strings.TrimPrefix(rest, "KINDS_"), val, "kind", kindEnvApply(c))
		default:
			for _, s := range strictSections {
				if strings.HasPrefix(rest, s) {
					err = errors.New("unknown configuration variable (see docs/configuration.md)")
				}
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

type namedApply struct {
	fields []string
	names  []string
	set    func(name, field, v string) error
}

func queueEnvApply(c *Config) namedApply {
	return namedApply{fields: keys(queueEnv), names: keys(c.Queues), set: func(name, field, v string) error {
		if c.Queues == nil {
			c.Queues = map[string]Queue{}
		}
		q := c.Queues[name]
		err := queueEnv[field](&q, v)
		c.Queues[name] = q
		return err
	}}
}

func kindEnvApply(c *Config) namedApply {
	return namedApply{fields: keys(kindEnv), names: keys(c.Kinds), set: func(name, field, v string) error {
		if c.Kinds == nil {
			c.Kinds = map[string]Kind{}
		}
		k := c.Kinds[name]
		err := kindEnv[field](&k, v)
		c.Kinds[name] = k
		return err
	}}
}

// applyNamed splits NAME_FIELD (field matched from the end), finds the
// declared queue or kind whose EnvName is NAME (else uses NAME lower-cased)
// and sets the field.
func (c *Config) applyNamed(rest, val, what string, a namedApply) error {
	for _, field := range a.fields {
		envName, ok := strings.CutSuffix(rest, "_"+field)
		if !ok || envName == "" {
			continue
		}
		var match []string
		for _, n := range a.names {
			if EnvName(n) == envName {
				match = append(match, n)
			}
		}
		switch len(match) {
		case 0:
			return a.set(strings.ToLower(envName), field, val)
		case 1:
			return a.set(match[0], field, val)
		default:
			return fmt.Errorf("names %s %ss %v; rename one", envName, what, match)
		}
	}
	return fmt.Errorf("unknown %s setting: want BACKSTOP_%sS_<NAME>_ and one of %s", what, strings.ToUpper(what), strings.Join(a.fields, ", "))
}

func keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	// Longest first, so MAX_ATTEMPTS wins over a shorter suffix.
	slices.SortFunc(ks, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	return ks
}

func parseRatio(v string, out **float64) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil {
		return fmt.Errorf("%q: want a number from 0 to 1", v)
	}
	*out = &f
	return nil
}

func parseInt(v string, out *int) error {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return fmt.Errorf("%q is not an integer", v)
	}
	*out = n
	return nil
}

func parseBool(v string, out *bool) error {
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return fmt.Errorf("%q is not true or false", v)
	}
	*out = b
	return nil
}

func parseDur(v string, out *Duration) error {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return fmt.Errorf("%q is not a duration (want e.g. 500ms, 30s, 5m, 1h)", v)
	}
	*out = Duration(d)
	return nil
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// parseRetry reads "1s,5s,30s" (a schedule) or "base=1s,factor=2,max=1h".
func parseRetry(v string, out **Retry) error {
	r := &Retry{}
	if !strings.Contains(v, "=") {
		for _, part := range strings.Split(v, ",") {
			var d Duration
			if err := parseDur(part, &d); err != nil {
				return fmt.Errorf("retry schedule: %w", err)
			}
			r.Schedule = append(r.Schedule, d)
		}
		*out = r
		return nil
	}
	for _, part := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return fmt.Errorf("retry %q: want base=D,factor=F,max=D or a schedule D,D,...", v)
		}
		var err error
		switch k {
		case "base":
			err = parseDur(val, &r.Base)
		case "max":
			err = parseDur(val, &r.Max)
		case "factor":
			r.Factor, err = strconv.ParseFloat(val, 64)
			if err != nil {
				err = fmt.Errorf("factor %q is not a number", val)
			}
		case "jitter":
			var b bool
			err = parseBool(val, &b)
			r.Jitter = &b
		default:
			err = fmt.Errorf("retry: unknown setting %q (want base, factor, max, jitter)", k)
		}
		if err != nil {
			return err
		}
	}
	*out = r
	return nil
}
