// Package taskjson is the JSON contract for task input shared by the CLI
// (enqueue --batch-file) and the HTTP API (POST /v1/tasks): one decoder, so
// both accept and refuse exactly the same documents. It decodes only; the
// library validates the values.
package taskjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
)

// enqueueRecord is one task as a producer describes it: the task's JSON keys,
// as `tasks show -o json` prints them, limited to what a producer sets.
type enqueueRecord struct {
	ID             string            `json:"id"`
	Queue          string            `json:"queue"`
	Kind           string            `json:"kind"`
	Payload        json.RawMessage   `json:"payload"`
	Priority       int               `json:"priority"`
	RunAt          json.RawMessage   `json:"run_at"` // RFC 3339
	Delay          json.RawMessage   `json:"delay"`  // duration string
	MaxAttempts    int               `json:"max_attempts"`
	Timeout        json.RawMessage   `json:"timeout"`  // duration string
	Deadline       json.RawMessage   `json:"deadline"` // RFC 3339
	Retry          json.RawMessage   `json:"retry"`    // {schedule, base, factor, max}
	Attributes     map[string]string `json:"attributes"`
	IdempotencyKey string            `json:"idempotency_key"`
	UniqueFor      json.RawMessage   `json:"unique_for"` // duration string
	MergeKey       string            `json:"merge_key"`
	Debounce       *debounceRecord   `json:"debounce"`
	Progress       *bt.Progress      `json:"progress"`
	Complexity     float64           `json:"complexity"`
	OrderingKey    string            `json:"ordering_key"`
	Sequence       int64             `json:"sequence"`
	Trace          bool              `json:"trace"`
}

// debounceRecord is a task's debounce: the key, the quiet period and the
// maximum wait (duration strings).
type debounceRecord struct {
	Key     string      `json:"key"`
	For     bt.Duration `json:"for"`
	MaxWait bt.Duration `json:"max_wait"`
}

// DecodeEnqueue decodes one task object (an NDJSON line of `enqueue
// --batch-file`, or one task of an HTTP enqueue). Unknown keys, trailing data and
// anything but a JSON object are errors; the library validates the values.
func DecodeEnqueue(line []byte) (backstop.EnqueueParams, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return backstop.EnqueueParams{}, errors.New("want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var r enqueueRecord
	if err := dec.Decode(&r); err != nil {
		return backstop.EnqueueParams{}, DescribeJSONError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return backstop.EnqueueParams{}, errors.New("unexpected data after the JSON object")
	}
	// encoding/json neither refuses invalid UTF-8 nor keeps it: bad bytes
	// in a string key become U+FFFD, in the payload they stay raw.
	if !utf8.Valid(line) {
		if !utf8.Valid(r.Payload) {
			return backstop.EnqueueParams{}, errors.New("payload: is not valid UTF-8 (JSON text must be UTF-8)")
		}
		return backstop.EnqueueParams{}, fmt.Errorf("the record is not valid UTF-8 (first bad byte at offset %d); JSON text must be UTF-8", BadUTF8(line))
	}
	p := backstop.EnqueueParams{
		ID:             r.ID,
		Queue:          r.Queue,
		Kind:           r.Kind,
		Payload:        r.Payload,
		Priority:       r.Priority,
		MaxAttempts:    r.MaxAttempts,
		Attributes:     r.Attributes,
		IdempotencyKey: r.IdempotencyKey,
		MergeKey:       r.MergeKey,
		Complexity:     r.Complexity,
		OrderingKey:    r.OrderingKey,
		Sequence:       r.Sequence,
		Trace:          r.Trace,
	}
	if r.Progress != nil {
		p.Progress = *r.Progress
	}
	var delay, timeout, uniqueFor bt.Duration
	var runAt, deadline time.Time
	for _, f := range []struct {
		key string
		raw json.RawMessage
		dst any
	}{
		{"run_at", r.RunAt, &runAt},
		{"delay", r.Delay, &delay},
		{"timeout", r.Timeout, &timeout},
		{"deadline", r.Deadline, &deadline},
		{"unique_for", r.UniqueFor, &uniqueFor},
	} {
		if err := decodeField(f.key, f.raw, f.dst); err != nil {
			return backstop.EnqueueParams{}, err
		}
	}
	// A time that is given is checked here: "0001-01-01T00:00:00Z" decodes
	// to the zero time, which the library reads as "not given" (now).
	for _, f := range []struct {
		key string
		raw json.RawMessage
		t   time.Time
	}{{"run_at", r.RunAt, runAt}, {"deadline", r.Deadline, deadline}} {
		if !isNull(f.raw) {
			if err := backstop.CheckTime(f.key, f.t); err != nil {
				return backstop.EnqueueParams{}, err
			}
		}
	}
	p.RunAt, p.Deadline = runAt.UTC(), deadline.UTC()
	p.Delay, p.Timeout = time.Duration(delay), time.Duration(timeout)
	// A window that is given must be one: zero would silently mean none.
	if !isNull(r.UniqueFor) && uniqueFor <= 0 {
		return backstop.EnqueueParams{}, fmt.Errorf("unique_for: must be a positive duration such as \"1h\", got %s", r.UniqueFor)
	}
	p.UniqueFor = time.Duration(uniqueFor)
	if d := r.Debounce; d != nil {
		p.Debounce = &backstop.Debounce{Key: d.Key, For: time.Duration(d.For), MaxWait: time.Duration(d.MaxWait)}
	}
	if !isNull(r.Retry) {
		p.Retry = new(bt.RetryPolicy)
		if err := decodeField("retry", r.Retry, p.Retry); err != nil {
			return backstop.EnqueueParams{}, err
		}
	}
	return p, nil
}

// BadUTF8 is the offset of the first byte of b that is not valid UTF-8
// (len(b) when there is none).
func BadUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// decodeField decodes one key's value, naming the key in the error; null or
// absent leaves dst as it is.
func decodeField(key string, raw json.RawMessage, dst any) error {
	if isNull(raw) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		if _, ok := dst.(*time.Time); ok {
			return fmt.Errorf("%s: want an RFC 3339 time such as \"2030-01-02T15:04:05Z\", got %s", key, raw)
		}
		return fmt.Errorf("%s: %v", key, DescribeJSONError(err))
	}
	return nil
}

// DescribeJSONError turns encoding/json's errors into messages that name the
// key at fault.
func DescribeJSONError(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("the JSON object is incomplete")
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Errorf("%s: want a JSON %s, got %s", te.Field, jsonTypeName(te.Type.Kind().String()), te.Value)
	}
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return fmt.Errorf("unknown key %s", rest)
	}
	return errors.New(strings.TrimPrefix(msg, "json: "))
}

func jsonTypeName(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "int", "int64", "float64":
		return "number"
	case "map", "struct", "ptr":
		return "object"
	case "slice":
		return "array"
	}
	return goKind
}
