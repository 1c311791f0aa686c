package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// MaxResultBytes bounds an attempt's JSON result (SetResult, a remote
// worker's completion, an exec worker's $BACKSTOP_RESULT_FILE): 1 MiB.
const MaxResultBytes = 1 << 20

// MarshalResult marshals a handler's result (a json.RawMessage as is) and
// checks it as CheckResult does.
func MarshalResult(v any) (json.RawMessage, error) {
	var b []byte
	switch r := v.(type) {
	case json.RawMessage:
		b = r
	case *json.RawMessage:
		if r != nil {
			b = *r
		}
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("backstop: SetResult: %w", err)
		}
	}
	b, err := CheckResult(b)
	if err != nil {
		return nil, fmt.Errorf("backstop: SetResult: %w", err)
	}
	return b, nil
}

// CheckResult checks an attempt's JSON result as every path that takes one
// does (SetResult, an exec worker's result file, a remote worker's
// completion): valid UTF-8 JSON of at most MaxResultBytes holding nothing
// PostgreSQL's jsonb cannot hold (a \u0000 or lone surrogate escape, a
// number outside its numeric type), as for a payload, else a
// ValidationError naming the field "result" and the value's path. Empty or
// the JSON null means no result (nil). The bytes are copied: the caller may
// reuse its buffer.
func CheckResult(b []byte) (json.RawMessage, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, nil
	}
	if len(b) > MaxResultBytes {
		return nil, Invalid("result", "is %d bytes; at most %d (1 MiB) are allowed", len(b), MaxResultBytes)
	}
	if err := CheckJSON("result", b); err != nil {
		return nil, err
	}
	if string(b) == "null" {
		return nil, nil
	}
	return bytes.Clone(b), nil
}
