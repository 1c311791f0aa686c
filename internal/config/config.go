// Package config reads Backstop's configuration: one YAML file plus
// BACKSTOP_* environment variables (the environment wins over the file).
// Every knob, its default and its environment name are in
// docs/configuration.md. Unknown keys are errors, and every error names the
// key path and the reason ("queues.emails.concurrency: must be positive").
//
// Precedence, highest first: command-line flags (applied by the CLI), the
// environment, the file, the defaults.
package config

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/ingest"
	"github.com/backstophq/backstop/internal/relay"
	"github.com/backstophq/backstop/internal/schedule"
	"github.com/backstophq/backstop/store"
)

// Defaults of the top-level knobs.
const (
	DefaultDB                  = "sqlite://backstop.db"
	DefaultAddr                = "127.0.0.1:8080"
	DefaultLeaderTTL           = 15 * time.Second
	DefaultMaintenanceInterval = time.Second
	DefaultWorkerConcurrency   = 10
	DefaultLease               = 30 * time.Second
)

// hostNameRE is a DNS host name: dot-separated labels of letters, digits
// and '-' (not at either end).
var hostNameRE = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*\.?$`)

// Config is the whole file. Zero values mean "the default" (see
// docs/configuration.md).
type Config struct {
	DB   string `yaml:"db" json:"db"`
	Addr string `yaml:"addr" json:"addr"`
	Dev  bool   `yaml:"dev" json:"dev"`
	// AllowedHosts: host names `serve` answers to besides loopback ones
	// when it listens on loopback, and whose origins may write (a proxy in
	// front of it); api.Options.AllowedHosts.
	AllowedHosts        []string         `yaml:"allowed_hosts" json:"allowed_hosts"`
	LeaderTTL           Duration         `yaml:"leader_ttl" json:"leader_ttl"`
	MaintenanceInterval Duration         `yaml:"maintenance_interval" json:"maintenance_interval"`
	MaxAttempts         int              `yaml:"max_attempts" json:"max_attempts"`
	Retry               *Retry           `yaml:"retry" json:"retry,omitempty"`
	Queues              map[string]Queue `yaml:"queues" json:"queues"`
	Kinds               map[string]Kind  `yaml:"kinds" json:"kinds"`
	Limits              Limits           `yaml:"limits" json:"limits"`
	Retention           Retention        `yaml:"retention" json:"retention"`
	Redaction           Redaction        `yaml:"redaction" json:"redaction"`
	Telemetry           Telemetry        `yaml:"telemetry" json:"telemetry"`
	DLQ                 DLQ              `yaml:"dlq" json:"dlq"`
	Workers             Workers          `yaml:"workers" json:"workers"`
	Log                 Log              `yaml:"log" json:"log"`
	// Sinks: the destinations of outbox messages, by name
	// (docs/brokers.md).
	Sinks map[string]Sink `yaml:"sinks" json:"sinks,omitempty"`
	// Schedules are periodic tasks by name (docs/configuration.md,
	// "schedules"): serve and work store them at start (a changed one
	// replaced), and the maintenance leader enqueues their ticks.
	Schedules map[string]Schedule `yaml:"schedules" json:"schedules,omitempty"`
	// Relay: the relay `serve` runs in-process (docs/brokers.md, "Running
	// it"), and the defaults of `backstop relay`.
	Relay Relay `yaml:"relay" json:"relay"`
	// Ingest: the ingesters `serve` runs in-process, one per entry.
	Ingest []Ingest `yaml:"ingest" json:"ingest,omitempty"`
}

// Relay is the relay `serve` runs (when Sinks names any) and the defaults
// of `backstop relay`'s flags (which override them).
type Relay struct {
	// Sinks: the sinks to deliver, names of the sinks: section; "all"
	// alone is every one of them. Default: none (serve runs no relay).
	Sinks []string `yaml:"sinks" json:"sinks,omitempty"`
	// Concurrency: messages in flight per sink (of distinct keys).
	// Default 16.
	Concurrency int `yaml:"concurrency" json:"concurrency,omitempty"`
	// Lease of a claimed message. Default 30s.
	Lease Duration `yaml:"lease" json:"lease,omitempty"`
	// Streams: event streams to publish (all, queue.Q, type.T...; --streams).
	Streams []string `yaml:"streams" json:"streams,omitempty"`
	// StreamsSink receives the events. Default: the only sink.
	StreamsSink string `yaml:"streams_sink" json:"streams_sink,omitempty"`
	// Checkpoint: the events' durable checkpoint. Default: the streams
	// sink's name.
	Checkpoint string `yaml:"checkpoint" json:"checkpoint,omitempty"`
	// StreamsTopic: the events' topic. Default backstop.events.{type}.
	StreamsTopic string `yaml:"streams_topic" json:"streams_topic,omitempty"`
	// From: where a new checkpoint starts, start (the log's beginning, the
	// default) or end (events from then on); an existing checkpoint is
	// never moved.
	From string `yaml:"from" json:"from,omitempty"`
}

// Ingest is one ingester `serve` runs (backstop ingest's flags as keys).
type Ingest struct {
	From             string   `yaml:"from" json:"from"`
	Topic            string   `yaml:"topic" json:"topic,omitempty"`
	Subject          string   `yaml:"subject" json:"subject,omitempty"`
	Queue            string   `yaml:"queue" json:"queue"`
	Kind             string   `yaml:"kind" json:"kind"`
	IDField          string   `yaml:"id_field" json:"id_field,omitempty"`
	IDHeader         string   `yaml:"id_header" json:"id_header,omitempty"`
	OrderingKeyField string   `yaml:"ordering_key_field" json:"ordering_key_field,omitempty"`
	SequenceField    string   `yaml:"sequence_field" json:"sequence_field,omitempty"`
	Group            string   `yaml:"group" json:"group,omitempty"`
	Batch            int      `yaml:"batch" json:"batch,omitempty"`
	MaxAttempts      int      `yaml:"max_attempts" json:"max_attempts,omitempty"`
	AckWait          Duration `yaml:"ack_wait" json:"ack_wait,omitempty"`
	// Elect: stand in the election of the topic and group (one ingester
	// reads at a time). Default true; false shares the group's partitions
	// (Kafka) or the durable's messages (NATS) with the others.
	Elect *bool `yaml:"elect" json:"elect,omitempty"`
}

// Spec is the ingester's settings with their defaults (batch 500, ack
// wait 30s).
func (in Ingest) Spec() ingest.Spec {
	return ingest.Spec{Source: ingest.Source{URL: in.From, Topic: in.Topic, Subject: in.Subject, Group: in.Group,
		Batch: cmp.Or(in.Batch, 500), AckWait: cmp.Or(in.AckWait.D(), 30*time.Second)},
		Queue: in.Queue, Kind: in.Kind, IDField: in.IDField, IDHeader: in.IDHeader,
		OrderingKeyField: in.OrderingKeyField, SequenceField: in.SequenceField, MaxAttempts: in.MaxAttempts}
}

// Elected says whether the ingester stands in its topic's election.
func (in Ingest) Elected() bool { return in.Elect == nil || *in.Elect }

// RelaySinks are the sink names relay.sinks selects ("all": every sink),
// sorted.
func (c *Config) RelaySinks() []string {
	if len(c.Relay.Sinks) == 1 && c.Relay.Sinks[0] == "all" {
		return sortedKeys(c.Sinks)
	}
	return slices.Sorted(slices.Values(c.Relay.Sinks))
}

// Sink is a destination of outbox messages: its URL and the policy of its
// queue, sink.<name> (an ordered queue: its messages' keys are ordering
// keys).
type Sink struct {
	// URL: nats://HOST:PORT (JetStream), kafka://HOST:PORT or
	// http(s)://... (a webhook). Required.
	URL string `yaml:"url" json:"url"`
	// Retry and MaxAttempts: the sink queue's retry policy. Default: the
	// top-level ones.
	Retry       *Retry `yaml:"retry" json:"retry,omitempty"`
	MaxAttempts int    `yaml:"max_attempts" json:"max_attempts,omitempty"`
	// Timeout bounds one delivery. Default 10s.
	Timeout Duration `yaml:"timeout" json:"timeout,omitempty"`
	// Secret signs webhook bodies (Backstop-Signature); never shown.
	Secret string `yaml:"secret" json:"-"`
	// Stream: the JetStream stream the relay creates when no stream
	// covers a subject. Default BACKSTOP_<NAME>.
	Stream string `yaml:"stream" json:"stream,omitempty"`
}

// RelayOptions are the relay's options of a sink.
func (s Sink) RelayOptions() relay.Options {
	return relay.Options{Timeout: s.Timeout.D(), Secret: s.Secret, Stream: s.Stream}
}

// Schedule is one periodic task: every or cron (with tz), the missed-tick
// policy, and the task each tick enqueues (backstop.ScheduleParams).
type Schedule struct {
	Every       Duration          `yaml:"every" json:"every,omitempty"`
	Cron        string            `yaml:"cron" json:"cron,omitempty"`
	TZ          string            `yaml:"tz" json:"tz,omitempty"`
	Missed      string            `yaml:"missed" json:"missed,omitempty"`
	Queue       string            `yaml:"queue" json:"queue"`
	Kind        string            `yaml:"kind" json:"kind"`
	Payload     JSONValue         `yaml:"payload" json:"payload,omitempty"`
	Attributes  map[string]string `yaml:"attributes" json:"attributes,omitempty"`
	Priority    int               `yaml:"priority" json:"priority,omitempty"`
	MaxAttempts int               `yaml:"max_attempts" json:"max_attempts,omitempty"`
}

// JSONValue is any YAML value, kept as its JSON (a task's payload).
type JSONValue json.RawMessage

// UnmarshalYAML implements yaml.Unmarshaler.
func (j *JSONValue) UnmarshalYAML(n *yaml.Node) error {
	var v any
	if err := n.Decode(&v); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("not representable as JSON: %v", err)
	}
	*j = b
	return nil
}

// MarshalYAML implements yaml.Marshaler: the value as YAML (config show).
func (j JSONValue) MarshalYAML() (any, error) {
	if len(j) == 0 {
		return nil, nil
	}
	var v any
	err := json.Unmarshal(j, &v)
	return v, err
}

// MarshalJSON implements json.Marshaler.
func (j JSONValue) MarshalJSON() ([]byte, error) {
	if len(j) == 0 {
		return []byte("null"), nil
	}
	return j, nil
}

// ScheduleParams are the configured schedules as the library takes them,
// by name, each replacing a stored one of its name.
func (c *Config) ScheduleParams() []backstop.ScheduleParams {
	var out []backstop.ScheduleParams
	for _, name := range sortedKeys(c.Schedules) {
		s := c.Schedules[name]
		out = append(out, backstop.ScheduleParams{Name: name, Every: s.Every.D(), Cron: s.Cron, TZ: s.TZ, Missed: s.Missed,
			Queue: s.Queue, Kind: s.Kind, Payload: json.RawMessage(s.Payload), Attributes: s.Attributes, Priority: s.Priority,
			MaxAttempts: s.MaxAttempts, Replace: true})
	}
	return out
}

// Workers is the worker registry's setting and the exec workers `serve`
// runs. The list form, `workers: [...]`, is Run alone.
type Workers struct {
	// StaleAfter: a registered worker not seen for this long reads as
	// stale (backstop.Config.WorkerStaleAfter). Default 1m.
	StaleAfter Duration `yaml:"stale_after" json:"stale_after"`
	Run        []Worker `yaml:"run" json:"run"`
	// list: the file used the list form (errors then name workers[i]).
	list bool
}

// runPath is the key path of Run's entry i, in the form the file used.
func (w *Workers) runPath(i int) string {
	if w.list {
		return fmt.Sprintf("workers[%d]", i)
	}
	return fmt.Sprintf("workers.run[%d]", i)
}

// DefaultWorkerStaleAfter is workers.stale_after's default.
const DefaultWorkerStaleAfter = time.Minute

// UnmarshalYAML reads the mapping or the list form (yaml.v3's strict
// check; decode reads the same forms with key paths in its errors).
func (w *Workers) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.SequenceNode {
		w.list = true
		return n.Decode(&w.Run)
	}
	type plain Workers
	return n.Decode((*plain)(w))
}

// Log is the logging of `serve`, `work` and the CLI.
type Log struct {
	// Level: debug, info, warn or error. Default info.
	Level string `yaml:"level" json:"level"`
}

// LogLevels are log.level's values.
var LogLevels = []string{"debug", "info", "warn", "error"}

// ParseLogLevel reads a log level (debug, info, warn, error; any case); ""
// is info.
func ParseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "info":
		return slog.LevelInfo, nil
	case "debug":
		return slog.LevelDebug, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("%q: want one of %s", s, strings.Join(LogLevels, ", "))
}

// Queue is the policy of one queue.
type Queue struct {
	Concurrency int      `yaml:"concurrency" json:"concurrency"`
	MaxAttempts int      `yaml:"max_attempts" json:"max_attempts"`
	Retry       *Retry   `yaml:"retry" json:"retry,omitempty"`
	Timeout     Duration `yaml:"timeout" json:"timeout"`
	Lease       Duration `yaml:"lease" json:"lease"`
	// Complexity: when a task of this queue is too complex (seed 000).
	Complexity Complexity `yaml:"complexity" json:"complexity"`
	// Ordering: per-key ordered processing (docs/ordering.md).
	Ordering Ordering `yaml:"ordering" json:"ordering"`
	// Limits: the queue's cluster-wide concurrency and rate limits by name
	// (docs/limits.md), set in the database when `serve` or `work` starts.
	Limits map[string]QueueLimit `yaml:"limits" json:"limits,omitempty"`
	// Fair: the queue's claims rotate across the values of an attribute
	// (docs/fairness.md), set in the database when `serve` or `work`
	// starts.
	Fair *QueueFair `yaml:"fair" json:"fair,omitempty"`
}

// QueueFair is a queue's fairness (backstop.FairQueue).
type QueueFair struct {
	By      string         `yaml:"by" json:"by"`
	Weights map[string]int `yaml:"weights" json:"weights,omitempty"`
}

// FairQueues are the fair queues the configuration declares, by name.
func (c *Config) FairQueues() []backstop.FairQueue {
	var out []backstop.FairQueue
	for _, q := range sortedKeys(c.Queues) {
		if f := c.Queues[q].Fair; f != nil {
			out = append(out, backstop.FairQueue{Queue: q, By: f.By, Weights: f.Weights})
		}
	}
	return out
}

// QueueLimit is one limit of a queue (backstop.Limit): concurrency, or
// rate (starts per second) with an optional burst (default max(1,
// ceil(rate))).
type QueueLimit struct {
	Kind        string  `yaml:"kind" json:"kind,omitempty"`
	Per         string  `yaml:"per" json:"per,omitempty"`
	Concurrency int     `yaml:"concurrency" json:"concurrency,omitempty"`
	Rate        float64 `yaml:"rate" json:"rate,omitempty"`
	Burst       int     `yaml:"burst" json:"burst,omitempty"`
}

// limit is the library's limit named name of queue.
func (l QueueLimit) limit(name, queue string) backstop.Limit {
	return backstop.Limit{Name: name, Queue: queue, Kind: l.Kind, Per: l.Per, Concurrency: l.Concurrency, Rate: l.Rate, Burst: l.Burst}
}

// ConcurrencyLimits are the limits the queues declare (concurrency and
// rate limits alike), by name.
func (c *Config) ConcurrencyLimits() []backstop.Limit {
	var out []backstop.Limit
	for _, q := range sortedKeys(c.Queues) {
		for _, name := range sortedKeys(c.Queues[q].Limits) {
			l := c.Queues[q].Limits[name]
			out = append(out, l.limit(name, q))
		}
	}
	return out
}

// Ordering is a queue's ordering settings (backstop.OrderingConfig).
type Ordering struct {
	Enabled        bool       `yaml:"enabled" json:"enabled"`
	Step           int64      `yaml:"step" json:"step,omitempty"`
	Backoff        []Duration `yaml:"backoff" json:"backoff,omitempty"`
	CircuitBreaker int        `yaml:"circuit_breaker" json:"circuit_breaker,omitempty"`
	KeyTTL         Duration   `yaml:"key_ttl" json:"key_ttl,omitempty"`
	FirstHold      Duration   `yaml:"first_hold" json:"first_hold,omitempty"`
	// Late: what happens to a task not newer than its key's last one:
	// "cancel" (stale, the default) or "run" (in its key's turn; step 0).
	Late string `yaml:"late" json:"late,omitempty"`
	// EnabledFor rolls ordering out gradually (backstop.OrderingRollout).
	EnabledFor *OrderingRollout `yaml:"enabled_for" json:"enabled_for,omitempty"`
}

// OrderingRollout selects the tasks that are ordered while ordering is
// rolled out: an attribute's values, a percentage of keys, or both.
type OrderingRollout struct {
	Attribute string   `yaml:"attribute" json:"attribute,omitempty"`
	Values    []string `yaml:"values" json:"values,omitempty"`
	Percent   float64  `yaml:"percent" json:"percent,omitempty"`
}

// Complexity is a queue's complexity policy (backstop.ComplexityPolicy).
type Complexity struct {
	MaxComplexity   float64 `yaml:"max_complexity" json:"max_complexity,omitempty"`
	MaxPayloadBytes int     `yaml:"max_payload_bytes" json:"max_payload_bytes,omitempty"`
	RouteTo         string  `yaml:"route_to" json:"route_to,omitempty"`
}

// Kind is the policy of one kind; it overrides its queue's.
type Kind struct {
	MergeRule   string   `yaml:"merge_rule" json:"merge_rule"`
	MaxAttempts int      `yaml:"max_attempts" json:"max_attempts"`
	Retry       *Retry   `yaml:"retry" json:"retry,omitempty"`
	Timeout     Duration `yaml:"timeout" json:"timeout"`
}

// Retry is a retry policy: either a schedule or exponential backoff.
type Retry struct {
	Schedule []Duration `yaml:"schedule" json:"schedule,omitempty"`
	Base     Duration   `yaml:"base" json:"base,omitempty"`
	Factor   float64    `yaml:"factor" json:"factor,omitempty"`
	Max      Duration   `yaml:"max" json:"max,omitempty"`
	Jitter   *bool      `yaml:"jitter" json:"jitter,omitempty"`
}

// Limits bound payloads and queue names.
type Limits struct {
	InlinePayloadLimit int `yaml:"inline_payload_limit" json:"inline_payload_limit"`
	MaxPayloadSize     int `yaml:"max_payload_size" json:"max_payload_size"`
	// MaxFanOutBytes bounds one workflow fan-out's item payloads, all
	// items together. Default 64 MiB.
	MaxFanOutBytes int  `yaml:"max_fanout_bytes" json:"max_fanout_bytes"`
	StrictQueues   bool `yaml:"strict_queues" json:"strict_queues"`
	// WhereCost and WhereTime: the budget of one request's where
	// evaluated in Go (one batch of a redrive, close or purge).
	WhereCost int      `yaml:"where_cost" json:"where_cost"`
	WhereTime Duration `yaml:"where_time" json:"where_time"`
}

// Retention says how long finished work is kept (negative: forever).
type Retention struct {
	Succeeded   Duration `yaml:"succeeded" json:"succeeded"`
	Canceled    Duration `yaml:"canceled" json:"canceled"`
	DeadLetters Duration `yaml:"dead_letters" json:"dead_letters"`
	Interval    Duration `yaml:"interval" json:"interval"`
	// Events of the event log (docs/events.md). Default 7 days.
	Events Duration `yaml:"events" json:"events"`
	// Runs: workflow runs finished for good. Default 7 days.
	Runs Duration `yaml:"runs" json:"runs"`
}

// DLQ is the policy of the dead-letter operations (docs/configuration.md).
type DLQ struct {
	// RequireReason: every operator action (replay, redrive, discard,
	// resolve, purge, cancel) must give a reason. Default: false.
	RequireReason bool `yaml:"require_reason" json:"require_reason"`
	// PurgeFloor: no purge deletes a dead letter younger than this: a
	// manual purge with a smaller older_than is refused unless the admin
	// says below_floor (--below-floor), and retention keeps closed dead
	// letters at least this long even when retention.dead_letters is
	// shorter. Exported as backstop_dlq_purge_floor_seconds; the alert
	// BackstopDLQPurgeBelowFloor fires when retention.dead_letters is
	// below it (a configuration that does not say what it does). Default:
	// 168h (7 days).
	PurgeFloor Duration `yaml:"purge_floor" json:"purge_floor"`
	// RedriveHeartbeat: how often a running redrive records that its
	// process is alive; `redrives resume` refuses one seen less than 3
	// heartbeats ago unless --force. Default: 5s.
	RedriveHeartbeat Duration `yaml:"redrive_heartbeat" json:"redrive_heartbeat"`
}

// DefaultPurgeFloor is dlq.purge_floor's default.
const DefaultPurgeFloor = 7 * 24 * time.Hour

// DLQGaugePolicy is the dead-letter policy the gauges export: the
// effective retention of closed dead letters and the purge floor.
func (c *Config) DLQGaugePolicy() store.DLQGaugePolicy {
	e := c.Effective()
	return store.DLQGaugePolicy{Retention: e.Retention.DeadLetters.D(), PurgeFloor: e.DLQ.PurgeFloor.D()}
}

// Redaction lists payload keys whose values are masked wherever a payload
// leaves the store (API, CLI); they add to the defaults (redact.DefaultKeys),
// and "!key" removes a default. See docs/redaction.md.
type Redaction struct {
	Keys []string `yaml:"keys" json:"keys"`
}

// Telemetry configures metrics, traces and logs (docs/observability.md).
type Telemetry struct {
	// OTLPEndpoint turns OTLP export of traces, metrics and logs on when
	// OTEL_EXPORTER_OTLP_ENDPOINT is not set.
	OTLPEndpoint string `yaml:"otlp_endpoint" json:"otlp_endpoint"`
	// SampleRatio of new traces (parent-based; errors always kept).
	// Default: 1.
	SampleRatio *float64 `yaml:"sample_ratio" json:"sample_ratio"`
	// Metrics on or off. Default: on.
	Metrics *bool `yaml:"metrics" json:"metrics"`
}

// Worker is an exec worker `backstop serve` runs in-process.
type Worker struct {
	Queue              string   `yaml:"queue" json:"queue"`
	Kinds              []string `yaml:"kinds" json:"kinds"`
	Concurrency        int      `yaml:"concurrency" json:"concurrency"`
	Lease              Duration `yaml:"lease" json:"lease"`
	Command            []string `yaml:"command" json:"command"`
	PermanentExitCodes []int    `yaml:"permanent_exit_codes" json:"permanent_exit_codes"`
}

// Duration is a time.Duration written as "30s", "5m", "1h30m".
type Duration time.Duration

// D is the duration as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML reads a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return errors.New("want a duration such as 30s")
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("%q is not a duration (want e.g. 500ms, 30s, 5m, 1h)", n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// MarshalText writes the duration string (JSON too).
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Load reads the file at path ("" for none), applies the environment and
// validates.
func Load(path string) (*Config, error) {
	var c *Config
	if path == "" {
		c = &Config{}
	} else {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		if c, err = Parse(b); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := c.ApplyEnv(os.Environ()); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		if path != "" {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return nil, err
	}
	return c, nil
}

// Parse decodes one YAML document. Unknown keys and wrong types are errors
// naming the key path; Parse does not validate values (Validate does).
func Parse(b []byte) (*Config, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &Config{}, nil // an empty file: every default
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("the file holds more than one YAML document")
	}
	c := &Config{}
	if err := decode(&doc, reflect.ValueOf(c).Elem(), "", 0); err != nil {
		return nil, err
	}
	// Belt and braces: yaml.v3's own strict decoding must agree.
	var check Config
	strict := yaml.NewDecoder(bytes.NewReader(b))
	strict.KnownFields(true)
	if err := strict.Decode(&check); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return c, nil
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// decode walks the node and the Go value together, so errors carry the key
// path and unknown keys are reported where they are.
func decode(n *yaml.Node, v reflect.Value, path string, depth int) error {
	if depth > 32 {
		return fmt.Errorf("%s: nested too deeply", where(path))
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil
		}
		return decode(n.Content[0], v, path, depth+1)
	case yaml.AliasNode:
		if n.Alias == nil {
			return fmt.Errorf("%s: bad alias", where(path))
		}
		return decode(n.Alias, v, path, depth+1)
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // key: (empty) keeps the default
	}
	if v.Type() == reflect.TypeFor[Workers]() {
		// Not its UnmarshalYAML: the fields are walked here, for the key
		// paths in errors.
		if n.Kind == yaml.SequenceNode {
			v.Addr().Interface().(*Workers).list = true
			return decode(n, v.FieldByName("Run"), path, depth+1)
		}
		return decodeStruct(n, v, path, depth)
	}
	if v.CanAddr() && v.Addr().Type().Implements(unmarshalerType) {
		if err := n.Decode(v.Addr().Interface()); err != nil {
			return fmt.Errorf("%s: %v", where(path), err)
		}
		return nil
	}
	switch v.Kind() {
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		if err := decode(n, p.Elem(), path, depth+1); err != nil {
			return err
		}
		v.Set(p)
		return nil
	case reflect.Struct:
		return decodeStruct(n, v, path, depth)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return fmt.Errorf("%s: want a mapping of names, got %s", where(path), describe(n))
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.Value == "" {
				return fmt.Errorf("%s: names must be plain non-empty strings (line %d)", where(path), k.Line)
			}
			if v.MapIndex(reflect.ValueOf(k.Value)).IsValid() {
				return fmt.Errorf("%s: %q is given twice (line %d)", where(path), k.Value, k.Line)
			}
			e := reflect.New(v.Type().Elem()).Elem()
			if err := decode(val, e, join(path, k.Value), depth+1); err != nil {
				return err
			}
			v.SetMapIndex(reflect.ValueOf(k.Value), e)
		}
		return nil
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return fmt.Errorf("%s: want a list, got %s", where(path), describe(n))
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			if err := decode(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("%s: want %s, got %s", where(path), kindName(v.Kind()), describe(n))
	}
	if err := n.Decode(v.Addr().Interface()); err != nil {
		return fmt.Errorf("%s: %q is not %s (line %d)", where(path), n.Value, kindName(v.Kind()), n.Line)
	}
	return nil
}

// decodeStruct decodes a mapping into the struct v, key by key.
func decodeStruct(n *yaml.Node, v reflect.Value, path string, depth int) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("%s: want a mapping (key: value lines), got %s", where(path), describe(n))
	}
	t := v.Type()
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("%s: keys must be plain names (line %d)", where(path), k.Line)
		}
		if seen[k.Value] {
			return fmt.Errorf("%s: key %q is given twice (line %d)", where(path), k.Value, k.Line)
		}
		seen[k.Value] = true
		f, ok := fieldByTag(t, k.Value)
		if !ok {
			return fmt.Errorf("unknown key %q in %s (line %d)%s", k.Value, where(path), k.Line, suggest(t, k.Value))
		}
		if err := decode(val, v.FieldByIndex(f.Index), join(path, k.Value), depth+1); err != nil {
			return err
		}
	}
	return nil
}

func fieldByTag(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if strings.Split(f.Tag.Get("yaml"), ",")[0] == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// suggest names the known key closest to a misspelt one.
func suggest(t reflect.Type, key string) string {
	best, bestD := "", 3
	var keys []string
	for i := range t.NumField() {
		k := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]
		keys = append(keys, k)
		if d := editDistance(strings.ToLower(key), k); d < bestD {
			best, bestD = k, d
		}
	}
	if best != "" {
		return fmt.Sprintf(": did you mean %q?", best)
	}
	return fmt.Sprintf(": known keys are %s", strings.Join(keys, ", "))
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func where(path string) string {
	if path == "" {
		return "the top level"
	}
	return path
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return fmt.Sprintf("a mapping (line %d)", n.Line)
	case yaml.SequenceNode:
		return fmt.Sprintf("a list (line %d)", n.Line)
	}
	return fmt.Sprintf("%q (line %d)", n.Value, n.Line)
}

func kindName(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	}
	return "a " + k.String()
}

// Validate names the first bad value with its key path.
func (c *Config) Validate() error {
	var errs []error
	bad := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
	}
	if c.DB != "" && !strings.HasPrefix(c.DB, "sqlite://") && !strings.HasPrefix(c.DB, "postgres://") && !strings.HasPrefix(c.DB, "postgresql://") {
		bad("db", "%q: want sqlite://PATH or postgres://...", c.DB)
	}
	if c.Addr != "" {
		if _, _, err := net.SplitHostPort(c.Addr); err != nil {
			bad("addr", "%q: want host:port", c.Addr)
		}
	}
	if c.LeaderTTL != 0 && c.LeaderTTL.D() < 100*time.Millisecond {
		bad("leader_ttl", "must be at least 100ms")
	}
	if c.MaintenanceInterval < 0 {
		bad("maintenance_interval", "must not be negative")
	}
	if c.MaxAttempts < 0 {
		bad("max_attempts", "must be positive")
	}
	if c.MaxAttempts > backstop.MaxAttemptsLimit {
		bad("max_attempts", "%d: at most %d", c.MaxAttempts, backstop.MaxAttemptsLimit)
	}
	c.Retry.validate("retry", bad)
	c.validateSinks(bad)
	c.validateRelay(bad)
	for i, in := range c.Ingest {
		p := fmt.Sprintf("ingest[%d]", i)
		spec := in.Spec()
		if _, err := spec.Mapping(func(key string) string { return p + "." + key }); err != nil {
			errs = append(errs, err) // it names the key
		}
	}
	for _, name := range sortedKeys(c.Queues) {
		q, p := c.Queues[name], "queues."+name
		if err := backstop.ValidID(name); err != nil {
			bad(p, "bad queue name: %v", err)
		}
		if q.Concurrency < 0 {
			bad(p+".concurrency", "must be positive")
		}
		if q.MaxAttempts < 0 {
			bad(p+".max_attempts", "must be positive")
		}
		if q.MaxAttempts > backstop.MaxAttemptsLimit {
			bad(p+".max_attempts", "%d: at most %d", q.MaxAttempts, backstop.MaxAttemptsLimit)
		}
		if q.Timeout < 0 {
			bad(p+".timeout", "must not be negative")
		}
		if q.Lease != 0 && q.Lease.D() < time.Second {
			bad(p+".lease", "must be at least 1s")
		}
		q.Retry.validate(p+".retry", bad)
		if q.Complexity.MaxComplexity < 0 {
			bad(p+".complexity.max_complexity", "must not be negative")
		}
		if q.Complexity.MaxPayloadBytes < 0 {
			bad(p+".complexity.max_payload_bytes", "must not be negative")
		}
		if q.Ordering.Step < 0 {
			bad(p+".ordering.step", "must not be negative")
		}
		for _, ln := range sortedKeys(q.Limits) {
			l := q.Limits[ln]
			var verr *backstop.ValidationError
			if err := backstop.ValidateLimit(l.limit(ln, name)); errors.As(err, &verr) {
				if verr.Field == "name" {
					bad(p+".limits."+ln, "bad limit name: %s", verr.Message)
				} else if verr.Field != "queue" {
					bad(p+".limits."+ln+"."+verr.Field, "%s", verr.Message)
				}
			}
		}
		if f := q.Fair; f != nil {
			var verr *backstop.ValidationError
			if err := backstop.ValidateFair(backstop.FairQueue{Queue: name, By: f.By, Weights: f.Weights}); errors.As(err, &verr) && verr.Field != "queue" {
				bad(p+".fair."+verr.Field, "%s", verr.Message)
			}
		}
		for i, d := range q.Ordering.Backoff {
			if d <= 0 {
				bad(fmt.Sprintf("%s.ordering.backoff[%d]", p, i), "must be positive")
			}
		}
		if q.Ordering.CircuitBreaker < 0 {
			bad(p+".ordering.circuit_breaker", "must not be negative")
		}
		if q.Ordering.KeyTTL < 0 {
			bad(p+".ordering.key_ttl", "must not be negative")
		}
		if q.Ordering.FirstHold < 0 {
			bad(p+".ordering.first_hold", "must not be negative")
		}
		switch q.Ordering.Late {
		case "", "cancel":
		case "run":
			if q.Ordering.Step != 0 {
				bad(p+".ordering.late", "run needs step 0 (any newer sequence next: no gaps to wait for)")
			}
		default:
			bad(p+".ordering.late", "must be cancel or run")
		}
		if r := q.Ordering.EnabledFor; r != nil {
			switch {
			case !q.Ordering.Enabled:
				bad(p+".ordering.enabled_for", "needs ordering.enabled: true")
			case r.Percent < 0 || r.Percent > 100:
				bad(p+".ordering.enabled_for.percent", "must be between 0 and 100")
			case (r.Attribute == "") != (len(r.Values) == 0):
				bad(p+".ordering.enabled_for", "attribute and values go together")
			case r.Attribute == "" && r.Percent == 0:
				bad(p+".ordering.enabled_for", "selects nothing: give attribute and values, or percent")
			}
		}
		if r := q.Complexity.RouteTo; r != "" {
			if err := backstop.ValidID(r); err != nil {
				bad(p+".complexity.route_to", "bad queue name: %v", err)
			} else if r == name {
				bad(p+".complexity.route_to", "names the queue itself")
			}
		}
	}
	for _, name := range sortedKeys(c.Kinds) {
		k, p := c.Kinds[name], "kinds."+name
		if err := backstop.ValidID(name); err != nil {
			bad(p, "bad kind name: %v", err)
		}
		switch k.MergeRule {
		case "", "replace", "append":
		default:
			bad(p+".merge_rule", "%q: want replace or append", k.MergeRule)
		}
		if k.MaxAttempts < 0 {
			bad(p+".max_attempts", "must be positive")
		}
		if k.MaxAttempts > backstop.MaxAttemptsLimit {
			bad(p+".max_attempts", "%d: at most %d", k.MaxAttempts, backstop.MaxAttemptsLimit)
		}
		if k.Timeout < 0 {
			bad(p+".timeout", "must not be negative")
		}
		k.Retry.validate(p+".retry", bad)
	}
	if c.Limits.InlinePayloadLimit < 0 {
		bad("limits.inline_payload_limit", "must not be negative")
	}
	if c.Limits.MaxPayloadSize < 0 {
		bad("limits.max_payload_size", "must not be negative")
	}
	if c.Limits.WhereCost < 0 {
		bad("limits.where_cost", "must not be negative")
	}
	if c.Limits.WhereTime < 0 {
		bad("limits.where_time", "must not be negative")
	}
	if c.Limits.MaxFanOutBytes < 0 {
		bad("limits.max_fanout_bytes", "must not be negative")
	}
	if c.Retention.Interval < 0 {
		bad("retention.interval", "must not be negative")
	}
	if c.DLQ.PurgeFloor < 0 {
		bad("dlq.purge_floor", "must not be negative")
	}
	if c.DLQ.RedriveHeartbeat < 0 {
		bad("dlq.redrive_heartbeat", "must not be negative")
	}
	for i, h := range c.AllowedHosts {
		if !hostNameRE.MatchString(h) && net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")) == nil {
			bad(fmt.Sprintf("allowed_hosts[%d]", i), "%q: want a host name or an IP address, without scheme or port (backstop.example.com)", h)
		}
	}
	for i, k := range c.Redaction.Keys {
		if strings.TrimSpace(k) == "" {
			bad(fmt.Sprintf("redaction.keys[%d]", i), "must not be empty")
		}
	}
	if r := c.Telemetry.SampleRatio; r != nil && !(*r >= 0 && *r <= 1) {
		bad("telemetry.sample_ratio", "%v: want a number from 0 to 1", *r)
	}
	if e := c.Telemetry.OTLPEndpoint; e != "" {
		if u, err := url.Parse(e); err != nil || u.Scheme == "" || u.Host == "" {
			bad("telemetry.otlp_endpoint", "%q: want a URL such as http://collector:4318", e)
		}
	}
	if w := c.Workers.StaleAfter; w != 0 && w.D() < time.Second {
		bad("workers.stale_after", "%s: must be at least 1s", w)
	}
	if _, err := ParseLogLevel(c.Log.Level); err != nil {
		bad("log.level", "%v", err)
	}
	for _, name := range sortedKeys(c.Schedules) {
		sc, p := c.Schedules[name], "schedules."+name
		if err := backstop.ValidID(name); err != nil {
			bad(p, "bad schedule name: %v", err)
		}
		var fe *schedule.FieldError
		if _, err := schedule.Parse(schedule.Spec{Every: sc.Every.D(), Cron: sc.Cron, TZ: sc.TZ}); errors.As(err, &fe) {
			bad(p+"."+fe.Field, "%s", fe.Msg)
		}
		if _, err := schedule.ParseMissed(sc.Missed); err != nil {
			bad(p+".missed", "%q: want skip, once or all", sc.Missed)
		}
		for _, f := range []struct{ key, v string }{{"queue", sc.Queue}, {"kind", sc.Kind}} {
			if f.v == "" {
				bad(p+"."+f.key, "is required")
			} else if err := backstop.ValidID(f.v); err != nil {
				bad(p+"."+f.key, "%v", err)
			}
		}
	}
	for i, w := range c.Workers.Run {
		p := c.Workers.runPath(i)
		if w.Queue == "" {
			bad(p+".queue", "is required")
		} else if err := backstop.ValidID(w.Queue); err != nil {
			bad(p+".queue", "%v", err)
		}
		for j, k := range w.Kinds {
			if err := backstop.ValidID(k); err != nil {
				bad(fmt.Sprintf("%s.kinds[%d]", p, j), "%v", err)
			}
		}
		if w.Concurrency < 0 {
			bad(p+".concurrency", "must be positive")
		}
		if w.Lease != 0 && w.Lease.D() < time.Second {
			bad(p+".lease", "must be at least 1s")
		}
		if len(w.Command) == 0 || w.Command[0] == "" {
			bad(p+".command", "is required (a list: [program, arg, ...])")
		}
		for j, code := range w.PermanentExitCodes {
			if code <= 0 || code > 255 || code == 75 {
				bad(fmt.Sprintf("%s.permanent_exit_codes[%d]", p, j), "%d: want 1-255, not 75 (EX_TEMPFAIL is always transient)", code)
			}
		}
	}
	return errors.Join(errs...)
}

func (r *Retry) validate(path string, bad func(string, string, ...any)) {
	if r == nil {
		return
	}
	if len(r.Schedule) > 0 && (r.Base != 0 || r.Factor != 0 || r.Max != 0) {
		bad(path, "give either schedule or base/factor/max, not both")
	}
	for i, d := range r.Schedule {
		if d < 0 {
			bad(fmt.Sprintf("%s.schedule[%d]", path, i), "must not be negative")
		}
	}
	if r.Base < 0 {
		bad(path+".base", "must not be negative")
	}
	if r.Max < 0 {
		bad(path+".max", "must not be negative")
	}
	if r.Factor != 0 && r.Factor < 1 {
		bad(path+".factor", "must be at least 1")
	}
	if base, maxD := cmp.Or(r.Base, Duration(bt.DefaultRetryPolicy.Base)), cmp.Or(r.Max, Duration(bt.DefaultRetryPolicy.Max)); base > maxD {
		bad(path+".base", "%s is greater than max %s", base.D(), maxD.D())
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// Policy converts r to the library's policy (nil stays nil).
func (r *Retry) Policy() *bt.RetryPolicy {
	if r == nil {
		return nil
	}
	p := &bt.RetryPolicy{Base: bt.Duration(r.Base), Factor: r.Factor, Max: bt.Duration(r.Max), Jitter: r.Jitter}
	for _, d := range r.Schedule {
		p.Schedule = append(p.Schedule, bt.Duration(d))
	}
	return p
}

// Library is the backstop.Config the file describes (Clock and Logger are
// the caller's).
func (c *Config) Library() *backstop.Config {
	out := &backstop.Config{
		InlinePayloadLimit: c.Limits.InlinePayloadLimit,
		MaxPayloadSize:     c.Limits.MaxPayloadSize,
		MaxFanOutBytes:     int64(c.Limits.MaxFanOutBytes),
		MaxAttempts:        c.MaxAttempts,
		Retry:              c.Retry.Policy(),
		StrictQueues:       c.Limits.StrictQueues,
		RedactKeys:         c.Redaction.Keys,
		RequireReason:      c.DLQ.RequireReason,
		PurgeFloor:         orDur(c.DLQ.PurgeFloor, DefaultPurgeFloor).D(),
		RedriveHeartbeat:   c.DLQ.RedriveHeartbeat.D(),
		WhereCost:          uint64(max(c.Limits.WhereCost, 0)),
		WhereTime:          c.Limits.WhereTime.D(),
		WorkerStaleAfter:   c.Workers.StaleAfter.D(),
		Retention: backstop.RetentionConfig{Succeeded: c.Retention.Succeeded.D(), Canceled: c.Retention.Canceled.D(),
			DeadLetters: c.Retention.DeadLetters.D(), Interval: c.Retention.Interval.D(), Events: c.Retention.Events.D(), Runs: c.Retention.Runs.D()},
	}
	if len(c.Queues) > 0 {
		out.Queues = map[string]backstop.QueueConfig{}
		for n, q := range c.Queues {
			out.Queues[n] = backstop.QueueConfig{Concurrency: q.Concurrency, MaxAttempts: q.MaxAttempts,
				Retry: q.Retry.Policy(), Timeout: q.Timeout.D(),
				Complexity: backstop.ComplexityPolicy{MaxComplexity: q.Complexity.MaxComplexity,
					MaxPayloadBytes: q.Complexity.MaxPayloadBytes, RouteTo: q.Complexity.RouteTo},
				Ordering: q.Ordering.library()}
		}
	}
	for name, sk := range c.Sinks {
		if out.Queues == nil {
			out.Queues = map[string]backstop.QueueConfig{}
		}
		out.Queues[backstop.SinkQueue(name)] = backstop.QueueConfig{MaxAttempts: sk.MaxAttempts, Retry: sk.Retry.Policy(),
			Ordering: backstop.OrderingConfig{Enabled: true, RunLate: true}}
	}
	if len(c.Kinds) > 0 {
		out.Kinds = map[string]backstop.KindConfig{}
		for n, k := range c.Kinds {
			out.Kinds[n] = backstop.KindConfig{MaxAttempts: k.MaxAttempts, Retry: k.Retry.Policy(),
				Timeout: k.Timeout.D(), MergeRule: backstop.MergeRule(k.MergeRule)}
		}
	}
	return out
}

// Effective is c with every default filled in, for `config show`.
func (c *Config) Effective() *Config {
	out := *c
	out.DB = orStr(c.DB, DefaultDB)
	out.Addr = orStr(c.Addr, DefaultAddr)
	out.LeaderTTL = orDur(c.LeaderTTL, DefaultLeaderTTL)
	out.MaintenanceInterval = orDur(c.MaintenanceInterval, DefaultMaintenanceInterval)
	if out.MaxAttempts == 0 {
		out.MaxAttempts = 25
	}
	if out.Retry == nil {
		out.Retry = &Retry{Base: Duration(time.Second), Factor: 2, Max: Duration(time.Hour)}
	}
	if out.Limits.InlinePayloadLimit == 0 {
		out.Limits.InlinePayloadLimit = 64 << 10
	}
	if out.Limits.MaxPayloadSize == 0 {
		out.Limits.MaxPayloadSize = 8 << 20
	}
	if out.Limits.WhereCost == 0 {
		out.Limits.WhereCost = int(backstop.DefaultWhereCost)
	}
	out.Limits.WhereTime = orDur(c.Limits.WhereTime, backstop.DefaultWhereTime)
	if out.Limits.MaxFanOutBytes == 0 {
		out.Limits.MaxFanOutBytes = backstop.DefaultMaxFanOutBytes
	}
	out.Retention.Succeeded = orDur(c.Retention.Succeeded, 24*time.Hour)
	out.Retention.Canceled = orDur(c.Retention.Canceled, 24*time.Hour)
	out.Retention.DeadLetters = orDur(c.Retention.DeadLetters, 30*24*time.Hour)
	out.Retention.Interval = orDur(c.Retention.Interval, time.Minute)
	out.Retention.Events = orDur(c.Retention.Events, 7*24*time.Hour)
	out.Retention.Runs = orDur(c.Retention.Runs, 7*24*time.Hour)
	out.DLQ.PurgeFloor = orDur(c.DLQ.PurgeFloor, DefaultPurgeFloor)
	out.DLQ.RedriveHeartbeat = orDur(c.DLQ.RedriveHeartbeat, backstop.DefaultRedriveHeartbeat)
	out.Queues = map[string]Queue{}
	for n, q := range c.Queues {
		if q.Concurrency == 0 {
			q.Concurrency = DefaultWorkerConcurrency
		}
		q.Lease = orDur(q.Lease, DefaultLease)
		out.Queues[n] = q
	}
	out.Kinds = map[string]Kind{}
	for n, k := range c.Kinds {
		k.MergeRule = orStr(k.MergeRule, "replace")
		out.Kinds[n] = k
	}
	out.Workers.StaleAfter = orDur(c.Workers.StaleAfter, DefaultWorkerStaleAfter)
	out.Workers.Run = nil
	out.Log.Level = orStr(strings.ToLower(c.Log.Level), "info")
	for _, w := range c.Workers.Run {
		if w.Concurrency == 0 {
			w.Concurrency = DefaultWorkerConcurrency
		}
		w.Lease = orDur(w.Lease, c.QueueLease(w.Queue))
		out.Workers.Run = append(out.Workers.Run, w)
	}
	if out.Redaction.Keys == nil {
		out.Redaction.Keys = []string{}
	}
	if out.AllowedHosts == nil {
		out.AllowedHosts = []string{}
	}
	return &out
}

// QueueLease is the lease of the queue's claims: the queue's lease, else 30s.
func (c *Config) QueueLease(queue string) time.Duration {
	if q, ok := c.Queues[queue]; ok && q.Lease > 0 {
		return q.Lease.D()
	}
	return DefaultLease
}

func orStr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orDur(d Duration, def time.Duration) Duration {
	if d == 0 {
		return Duration(def)
	}
	return d
}

var envNameRE = regexp.MustCompile(`[^A-Z0-9]+`)

// EnvName is how a queue or kind name appears in an environment variable:
// upper-cased, every run of other characters than letters and digits
// replaced by one '_'.
func EnvName(name string) string {
	return strings.Trim(envNameRE.ReplaceAllString(strings.ToUpper(name), "_"), "_")
}

func (o Ordering) library() backstop.OrderingConfig {
	out := backstop.OrderingConfig{Enabled: o.Enabled, Step: o.Step, CircuitBreaker: o.CircuitBreaker, KeyTTL: o.KeyTTL.D(),
		FirstHold: o.FirstHold.D(), RunLate: o.Late == "run"}
	for _, d := range o.Backoff {
		out.Backoff = append(out.Backoff, d.D())
	}
	if r := o.EnabledFor; r != nil {
		out.EnabledFor = &backstop.OrderingRollout{Attribute: r.Attribute, Values: r.Values, Percent: r.Percent}
	}
	return out
}

// validateSinks names the bad sink settings.
func (c *Config) validateSinks(bad func(string, string, ...any)) {
	for _, name := range sortedKeys(c.Sinks) {
		sk, p := c.Sinks[name], "sinks."+name
		if err := relay.ValidName(name); err != nil {
			bad(p, "bad sink name: %v", err)
		}
		if sk.URL == "" {
			bad(p+".url", "required: nats://HOST:PORT, kafka://HOST:PORT or http(s)://...")
		} else if _, err := relay.ParseURL(sk.URL); err != nil {
			bad(p+".url", "%v", err)
		}
		if sk.MaxAttempts < 0 || sk.MaxAttempts > backstop.MaxAttemptsLimit {
			bad(p+".max_attempts", "must be between 1 and %d", backstop.MaxAttemptsLimit)
		}
		if sk.Timeout < 0 {
			bad(p+".timeout", "must not be negative")
		}
		sk.Retry.validate(p+".retry", bad)
		if _, ok := c.Queues[backstop.SinkQueue(name)]; ok {
			bad(p, "queue %s is also declared under queues; set its policy here", backstop.SinkQueue(name))
		}
	}
}

// validateRelay names the bad relay settings.
func (c *Config) validateRelay(bad func(string, string, ...any)) {
	r := c.Relay
	all := len(r.Sinks) == 1 && r.Sinks[0] == "all"
	seen := map[string]bool{}
	for i, name := range r.Sinks {
		p := fmt.Sprintf("relay.sinks[%d]", i)
		switch _, ok := c.Sinks[name]; {
		case all:
		case name == "all":
			bad(p, "all stands alone (it is every sink)")
		case !ok:
			bad(p, "%q: no such sink under sinks: (declared: %s)", name, strings.Join(sortedKeys(c.Sinks), ", "))
		case seen[name]:
			bad(p, "%q is given twice", name)
		}
		seen[name] = true
	}
	if r.Concurrency < 0 {
		bad("relay.concurrency", "must be positive")
	}
	if r.Lease != 0 && r.Lease.D() < time.Second {
		bad("relay.lease", "must be at least 1s")
	}
	if len(r.Streams) == 0 {
		for _, k := range []struct{ key, v string }{{"streams_sink", r.StreamsSink}, {"checkpoint", r.Checkpoint}, {"streams_topic", r.StreamsTopic}, {"from", r.From}} {
			if k.v != "" {
				bad("relay."+k.key, "needs relay.streams")
			}
		}
		return
	}
	if _, err := relay.ParseStreams(strings.Join(r.Streams, ",")); err != nil {
		bad("relay.streams", "%s", strings.TrimPrefix(err.Error(), "--streams: "))
	}
	if r.StreamsTopic != "" {
		if err := relay.CheckTopic(r.StreamsTopic); err != nil {
			bad("relay.streams_topic", "%v", err)
		}
	}
	if r.From != "" && r.From != relay.FromStart && r.From != relay.FromEnd {
		bad("relay.from", "%q: want start or end", r.From)
	}
	if len(r.Checkpoint) > 200 {
		bad("relay.checkpoint", "at most 200 bytes")
	}
	names := c.RelaySinks()
	switch {
	case len(names) == 0:
		bad("relay.streams", "needs relay.sinks (the sink that receives the events)")
	case r.StreamsSink == "" && len(names) > 1:
		bad("relay.streams_sink", "which sink receives the events? one of %s", strings.Join(names, ", "))
	case r.StreamsSink != "" && !slices.Contains(names, r.StreamsSink):
		bad("relay.streams_sink", "%q: not one of relay.sinks (%s)", r.StreamsSink, strings.Join(names, ", "))
	}
}
