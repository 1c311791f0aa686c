package backstop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// MaxResultBytes bounds an attempt's JSON result (SetResult, a remote
// worker's completion, an exec worker's $BACKSTOP_RESULT_FILE): 1 MiB.
const MaxResultBytes = 1 << 20

// ErrNotInHandler: SetResult was called with a context that is not a
// handler's.
var ErrNotInHandler = errors.New("backstop: SetResult: the context is not a handler's (call it with the context the handler was given)")

// SetResult records the JSON result of the attempt ctx belongs to: v is
// marshalled (a json.RawMessage is taken as is, but must be valid JSON), at
// most MaxResultBytes, holding nothing a payload may not (CheckResult). It
// is kept with the attempt's settlement when the attempt succeeds (a
// workflow step's result, which its successors receive); a later call
// replaces an earlier one. Outside a handler's context it returns
// ErrNotInHandler.
//
// A result that cannot be recorded is the handler's bug, which no retry
// fixes: SetResult returns a Permanent error naming the value's path and
// why (and wrapping ErrInvalid), and unless a later call records a result,
// the attempt fails permanently with that error even if the handler
// returns nil; it never succeeds without the result it tried to record.
func SetResult(ctx context.Context, v any) error {
	a := attemptFrom(ctx)
	if a == nil {
		return ErrNotInHandler
	}
	b, err := marshalResult(v)
	if err != nil {
		err = Permanent(err)
	}
	a.mu.Lock()
	a.output, a.outputErr = b, err
	a.mu.Unlock()
	return err
}

func marshalResult(v any) (json.RawMessage, error) {
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
		return nil, invalid("result", "is %d bytes; at most %d (1 MiB) are allowed", len(b), MaxResultBytes)
	}
	if err := checkJSON("result", b); err != nil {
		return nil, err
	}
	if string(b) == "null" {
		return nil, nil
	}
	return bytes.Clone(b), nil
}

// resultOf is the result the handler recorded (SetResult), for the
// success settlement, or why its last SetResult was refused.
func (a *attempt) resultOf() (json.RawMessage, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.output, a.outputErr
}
