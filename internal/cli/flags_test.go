package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
)

func TestParseAttr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, key, value, err string
	}{
		{in: "tenant=acme", key: "tenant", value: "acme"},
		{in: "run_id=", key: "run_id", value: ""},
		{in: "expr=a=b", key: "expr", value: "a=b"},
		{in: "list=a,b", key: "list", value: "a,b"},
		{in: "_x.y-z=1", key: "_x.y-z", value: "1"},
		{in: "noequals", err: "want key=value"},
		{in: "=v", err: "key"},
		{in: "9lives=v", err: "key"},
		{in: "has space=v", err: "key"},
		{in: "k=" + strings.Repeat("v", 1025), err: "value"},
		{in: "k=\xff", err: "UTF-8"},
	} {
		k, v, err := parseAttr(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || exitCode(err) != ExitUsage {
				t.Errorf("parseAttr(%q) = %v, want a usage error containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || k != tc.key || v != tc.value {
			t.Errorf("parseAttr(%q) = %q, %q, %v; want %q, %q", tc.in, k, v, err, tc.key, tc.value)
		}
	}
}

func TestParseAttrs(t *testing.T) {
	t.Parallel()
	m, err := parseAttrs([]string{"a=1", "b=2"})
	if err != nil || len(m) != 2 || m["a"] != "1" || m["b"] != "2" {
		t.Fatalf("parseAttrs = %v, %v", m, err)
	}
	if m, err := parseAttrs(nil); m != nil || err != nil {
		t.Fatalf("parseAttrs(nil) = %v, %v; want nil, nil", m, err)
	}
	if _, err := parseAttrs([]string{"a=1", "a=2"}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("duplicate key: err = %v", err)
	}
	many := make([]string, 65)
	for i := range many {
		many[i] = "k" + strings.Repeat("x", i) + "=v"
	}
	if _, err := parseAttrs(many); err == nil || exitCode(err) != ExitUsage {
		t.Fatalf("65 attributes: err = %v, want a usage error", err)
	}
}

func TestParseSchedule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []time.Duration
		err  bool
	}{
		{in: "1s", want: []time.Duration{time.Second}},
		{in: "100ms, 2s,1m", want: []time.Duration{100 * time.Millisecond, 2 * time.Second, time.Minute}},
		{in: "0s", want: []time.Duration{0}},
		{in: "", err: true},
		{in: "1s,,2s", err: true},
		{in: "1s,", err: true},
		{in: "-1s", err: true},
		{in: "10", err: true},
		{in: "soon", err: true},
	} {
		got, err := parseSchedule(tc.in)
		if tc.err {
			if err == nil || exitCode(err) != ExitUsage || !strings.Contains(err.Error(), "--retry-schedule") {
				t.Errorf("parseSchedule(%q) = %v, %v; want a usage error naming --retry-schedule", tc.in, got, err)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("parseSchedule(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			continue
		}
		for i := range got {
			if time.Duration(got[i]) != tc.want[i] {
				t.Errorf("parseSchedule(%q)[%d] = %v, want %v", tc.in, i, got[i], tc.want[i])
			}
		}
	}
}

func TestParseTime(t *testing.T) {
	t.Parallel()
	got, err := parseTime("run-at", "2030-01-02T03:04:05.5+02:00")
	if err != nil || !got.Equal(time.Date(2030, 1, 2, 1, 4, 5, 5e8, time.UTC)) || got.Location() != time.UTC {
		t.Fatalf("parseTime = %v, %v", got, err)
	}
	for _, in := range []string{"", "tomorrow", "2030-01-02", "2030-01-02 03:04:05Z", "2030-13-02T03:04:05Z"} {
		if _, err := parseTime("run-at", in); err == nil || !strings.Contains(err.Error(), "--run-at") {
			t.Errorf("parseTime(%q): err = %v, want one naming --run-at", in, err)
		}
	}
}

func TestDecodeBatchLine(t *testing.T) {
	t.Parallel()
	p, err := decodeBatchLine([]byte(`{"id":"t1","queue":"q","kind":"k","payload":{"a":[1,2]},"priority":-3,
		"run_at":"2030-01-02T03:04:05Z","max_attempts":5,"timeout":"30s","deadline":"2031-01-01T00:00:00+01:00",
		"retry":{"schedule":["1s","2s"]},"attributes":{"tenant":"acme"},"idempotency_key":"ik","merge_key":"mk",
		"progress":{"total_steps":10,"completed_steps":2},"complexity":1.5}`))
	if err != nil {
		t.Fatal(err)
	}
	want := backstop.EnqueueParams{ID: "t1", Queue: "q", Kind: "k", Priority: -3, MaxAttempts: 5,
		Timeout: 30 * time.Second, IdempotencyKey: "ik", MergeKey: "mk", Complexity: 1.5,
		Progress: backstop.Progress{Total: 10, Completed: 2}}
	if p.ID != want.ID || p.Queue != want.Queue || p.Kind != want.Kind || p.Priority != want.Priority ||
		p.MaxAttempts != want.MaxAttempts || p.Timeout != want.Timeout || p.IdempotencyKey != want.IdempotencyKey ||
		p.MergeKey != want.MergeKey || p.Complexity != want.Complexity || p.Progress != want.Progress {
		t.Errorf("decoded %+v, want %+v", p, want)
	}
	if string(p.Payload) != `{"a":[1,2]}` {
		t.Errorf("payload = %s", p.Payload)
	}
	if !p.RunAt.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) || !p.Deadline.Equal(time.Date(2030, 12, 31, 23, 0, 0, 0, time.UTC)) {
		t.Errorf("run_at = %v, deadline = %v", p.RunAt, p.Deadline)
	}
	if p.Retry == nil || len(p.Retry.Schedule) != 2 || p.Retry.Schedule[1] != bt.Duration(2*time.Second) {
		t.Errorf("retry = %+v", p.Retry)
	}
	if p.Attributes["tenant"] != "acme" {
		t.Errorf("attributes = %v", p.Attributes)
	}

	p, err = decodeBatchLine([]byte(`{"queue":"q","kind":"k","delay":"1m","retry":null,"run_at":null}`))
	if err != nil || p.Delay != time.Minute || p.Retry != nil || !p.RunAt.IsZero() {
		t.Errorf("delay record = %+v, %v", p, err)
	}

	for _, tc := range []struct{ in, err string }{
		{``, "JSON object"},
		{`null`, "JSON object"},
		{`[1]`, "JSON object"},
		{`"x"`, "JSON object"},
		{`{"queue":"q"`, "incomplete"},
		{`{"queue":"q"} {}`, "after the JSON object"},
		{`{"queue":"q"} x`, "after the JSON object"},
		{`{"queue":"q","state":"pending"}`, `unknown key "state"`},
		{`{"queue":"q","retry":{"schedule":["1s"],"extra":1}}`, `retry: unknown key "extra"`},
		{`{"queue":"q","progress":{"total":1}}`, `unknown key "total"`},
		{`{"queue":1}`, "queue: want a JSON string"},
		{`{"priority":"high"}`, "priority: want a JSON number"},
		{`{"attributes":{"k":1}}`, "attributes"},
		{`{"delay":"soon"}`, "delay"},
		{`{"timeout":true}`, "timeout"},
		{`{"run_at":"tomorrow"}`, "run_at: want an RFC 3339 time"},
		{`{"deadline":12}`, "deadline: want an RFC 3339 time"},
		{`{"retry":{"schedule":"1s"}}`, "retry"},
		{`{"payload":{"a":}}`, "invalid character"},
	} {
		_, err := decodeBatchLine([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("decodeBatchLine(%s) = %v, want an error containing %q", tc.in, err, tc.err)
		}
	}
}

func FuzzParseAttr(f *testing.F) {
	for _, s := range []string{"a=b", "tenant=acme", "=", "k=", "a=b=c", "9=x", "k=\xff", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, v, err := parseAttr(s)
		if err != nil {
			if exitCode(err) != ExitUsage {
				t.Fatalf("parseAttr(%q): error %v is not a usage error", s, err)
			}
			return
		}
		if k+"="+v != s {
			t.Fatalf("parseAttr(%q) = %q, %q: does not round-trip", s, k, v)
		}
		if err := backstop.ValidateAttributes(map[string]string{k: v}); err != nil {
			t.Fatalf("parseAttr(%q) accepted an attribute the library refuses: %v", s, err)
		}
	})
}

func FuzzParseSchedule(f *testing.F) {
	for _, s := range []string{"1s", "100ms,200ms,400ms", "", ",", "-1s", "1h2m3s", "9999999999h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sched, err := parseSchedule(s)
		if err != nil {
			if exitCode(err) != ExitUsage {
				t.Fatalf("parseSchedule(%q): error %v is not a usage error", s, err)
			}
			return
		}
		if len(sched) == 0 {
			t.Fatalf("parseSchedule(%q) accepted an empty schedule", s)
		}
		p := bt.RetryPolicy{Schedule: sched}
		if err := p.Validate(); err != nil {
			t.Fatalf("parseSchedule(%q) = %v, which the library refuses: %v", s, sched, err)
		}
	})
}

func FuzzBatchLine(f *testing.F) {
	for _, s := range []string{
		`{"queue":"q","kind":"k"}`,
		`{"queue":"q","kind":"k","payload":{"a":1},"delay":"1s","retry":{"schedule":["1s"]}}`,
		`{"run_at":"2030-01-02T03:04:05Z","deadline":null,"progress":{"total_steps":3}}`,
		`{"attributes":{"a":"b"},"complexity":1e308}`,
		`{"timeout":123}`,
		`{}`, `{`, `[]`, `null`, ``, `{"x":1}`, "{}\v", ` {"queue":"q"} `,
		"{\"payload\":{\"a\":\"\xff\xfe\"}}", "{\"attributes\":{\"a\":\"\xff\"}}", `{"run_at":"0001-01-01T00:00:00Z"}`,
		`{"deadline":"10000-01-01T00:00:00Z"}`, `{"run_at":"1969-12-31T23:59:59Z"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		p, err := decodeBatchLine(line)
		if err != nil {
			return
		}
		// Whatever decodes was one whole JSON object (surrounding white space
		// aside), and its payload is JSON.
		if trimmed := bytes.TrimSpace(line); !json.Valid(trimmed) || trimmed[0] != '{' {
			t.Fatalf("decodeBatchLine(%q) accepted something that is not one JSON object", line)
		}
		if len(p.Payload) > 0 && !json.Valid(p.Payload) {
			t.Fatalf("decodeBatchLine(%q) kept an invalid payload %q", line, p.Payload)
		}
		// Nothing that is not UTF-8 gets through, neither raw (the payload)
		// nor rewritten to U+FFFD (string keys).
		if !utf8.Valid(line) {
			t.Fatalf("decodeBatchLine(%q) accepted a record that is not UTF-8", line)
		}
		// A time that was given is a usable one, never the zero time.
		for _, at := range []time.Time{p.RunAt, p.Deadline} {
			if !at.IsZero() && (at.Year() < 1970 || at.Year() > 9999) {
				t.Fatalf("decodeBatchLine(%q) accepted the time %v", line, at)
			}
		}
	})
}

// FuzzParseTime: a time flag accepts only RFC 3339 times in 1970-9999 (the
// zero time would read as "not given"); every refusal is a usage error.
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"2030-01-02T15:04:05Z", "0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "9999-12-31T23:59:59+01:00",
		"2030-01-02T15:04:05.999999999-07:00", "tomorrow", "", "2030-13-01T00:00:00Z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		at, err := parseTime("run-at", s)
		if err != nil {
			if exitCode(err) != ExitUsage {
				t.Fatalf("parseTime(%q): %v is not a usage error", s, err)
			}
			return
		}
		if at.IsZero() || at.Year() < 1970 || at.Year() > 9999 || at.Location() != time.UTC {
			t.Fatalf("parseTime(%q) = %v", s, at)
		}
	})
}

// FuzzParseAge: an age ("30d", "12h", "1d12h") is never negative.
func FuzzParseAge(f *testing.F) {
	for _, s := range []string{"30d", "12h", "1d12h", "d", "-1d", "1d-48h", "99999999999d", "0", "", "1.5h", "1dd"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseAge(s)
		if err == nil && d < 0 {
			t.Fatalf("parseAge(%q) = %s", s, d)
		}
	})
}
