package backstop

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/backstophq/backstop/internal/engine"
)

// MaxResultBytes bounds an attempt's JSON result (SetResult, a remote
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
	b, err := engine.MarshalResult(v)
	if err != nil {
		err = Permanent(err)
	}
	a.mu.Lock()
	a.output, a.outputErr = b, err
	a.mu.Unlock()
	return err
}

// resultOf is the result the handler recorded (SetResult), for the
// success settlement, or why its last SetResult was refused.
func (a *attempt) resultOf() (json.RawMessage, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.output, a.outputErr
}
