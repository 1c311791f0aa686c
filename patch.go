package backstop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/backstophq/backstop/internal/engine"
)

// ErrUnprocessable marks a request that is well formed but cannot be applied
// (a replay patch that does not fit the payload): the HTTP API answers 422.
// Errors that wrap it also wrap ErrInvalid, so the CLI exits 2.
var ErrUnprocessable = errors.New("unprocessable")

type unprocessableError struct{ msg string }

func (e *unprocessableError) Error() string   { return e.msg }
func (e *unprocessableError) Unwrap() []error { return []error{ErrUnprocessable, ErrInvalid} }

func unprocessable(format string, args ...any) error {
	return &unprocessableError{msg: fmt.Sprintf(format, args...)}
}

// PatchOp sets the JSON value at a dotted path of the payload ("a.b.c";
// a segment that is a number indexes an existing array element).
// Intermediate objects are created; a path through a scalar is refused.
type PatchOp struct {
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value"`
}

// ParsePatch parses the CLI form "path=VALUE": VALUE is taken as JSON when
// it is valid JSON, else as a string.
func ParsePatch(s string) (PatchOp, error) {
	path, value, ok := strings.Cut(s, "=")
	if !ok || path == "" {
		return PatchOp{}, invalid("patch", "%q: want path=VALUE", s)
	}
	// Checked before the string fallback: json.Marshal would quietly turn
	// invalid UTF-8 into U+FFFD.
	if !utf8.ValidString(s) {
		return PatchOp{}, invalid("patch", "%q is not valid UTF-8", s)
	}
	v := []byte(value)
	if !json.Valid(v) {
		v, _ = json.Marshal(value)
	}
	return PatchOp{Path: path, Value: v}, nil
}

// checkPatch refuses what a replay or redrive patch must never carry into
// a payload: invalid UTF-8 in a merge patch, a path or a value
// (encoding/json would decode it as U+FFFD and store a payload other than
// the one asked for), a merge patch that is not JSON, or a value a payload
// must not hold (checkJSON: a \u0000 or lone surrogate escape, a number
// outside PostgreSQL's numeric). A path or value that does not fit the
// payload is applyPatch's to refuse.
func checkPatch(merge json.RawMessage, ops []PatchOp) error {
	if len(merge) > 0 {
		if !utf8.Valid(merge) {
			return invalid("merge_patch", "is not valid UTF-8 (JSON text must be UTF-8)")
		}
		if !json.Valid(merge) {
			return unprocessable("merge patch: invalid JSON")
		}
		if why := engine.JSONBProblem("merge_patch", merge); why != "" {
			return invalid("merge_patch", "%s", why)
		}
	}
	for _, op := range ops {
		if !utf8.ValidString(op.Path) || !utf8.Valid(op.Value) {
			return invalid("patch", "%q is not valid UTF-8 (JSON text must be UTF-8)", op.Path)
		}
		if json.Valid(op.Value) {
			if why := engine.JSONBProblem("payload."+op.Path, op.Value); why != "" {
				return invalid("patch", "%s", why)
			}
		}
	}
	return nil
}

func decodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

// applyPatch applies an RFC 7396 merge patch (if any), then each PatchOp in
// order, to payload. Any failure refuses the whole patch.
func applyPatch(payload json.RawMessage, merge json.RawMessage, ops []PatchOp) (json.RawMessage, error) {
	if len(payload) == 0 {
		payload = json.RawMessage(`{}`)
	}
	doc, err := decodeJSON(payload)
	if err != nil {
		return nil, unprocessable("patch: the payload is not valid JSON: %v", err)
	}
	if len(merge) > 0 {
		mp, err := decodeJSON(merge)
		if err != nil {
			return nil, unprocessable("merge patch: invalid JSON: %v", err)
		}
		doc = MergePatch(doc, mp)
	}
	for _, op := range ops {
		v, err := decodeJSON(op.Value)
		if err != nil {
			return nil, unprocessable("patch %s: invalid JSON value: %v", op.Path, err)
		}
		if doc, err = setPath(doc, strings.Split(op.Path, "."), v, op.Path); err != nil {
			return nil, err
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, unprocessable("patch: %v", err)
	}
	// The patch itself was checked (checkPatch); what it leaves of a
	// payload stored before the rule is checked here.
	if why := engine.JSONBProblem("payload", out); why != "" {
		return nil, unprocessable("patch: the patched payload cannot be stored: %s", why)
	}
	return out, nil
}

// MergePatch applies an RFC 7396 JSON merge patch to target (values as
// decoded by encoding/json) and returns the result.
func MergePatch(target, patch any) any {
	pm, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	tm, ok := target.(map[string]any)
	if !ok {
		tm = map[string]any{}
	}
	for k, v := range pm {
		if v == nil {
			delete(tm, k)
		} else {
			tm[k] = MergePatch(tm[k], v)
		}
	}
	return tm
}

func setPath(doc any, segs []string, v any, full string) (any, error) {
	if len(segs) == 0 {
		return v, nil
	}
	seg := segs[0]
	if seg == "" {
		return nil, unprocessable("patch %s: empty path segment", full)
	}
	switch d := doc.(type) {
	case map[string]any:
		child, err := setPath(d[seg], segs[1:], v, full)
		if err != nil {
			return nil, err
		}
		d[seg] = child
		return d, nil
	case nil:
		child, err := setPath(nil, segs[1:], v, full)
		if err != nil {
			return nil, err
		}
		return map[string]any{seg: child}, nil
	case []any:
		i, err := strconv.Atoi(seg)
		if err != nil || i < 0 || i >= len(d) {
			return nil, unprocessable("patch %s: %q is not an index of the array there (length %d)", full, seg, len(d))
		}
		child, err := setPath(d[i], segs[1:], v, full)
		if err != nil {
			return nil, err
		}
		d[i] = child
		return d, nil
	default:
		return nil, unprocessable("patch %s: the path goes through a scalar (%s) at %q", full, jsonType(doc), seg)
	}
}

func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	case json.Number, float64:
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

// patchBase is the payload a replay's patch applies to: a fan-out item's
// with its run's input put back (so a patch of input.x changes what the
// handler receives, and the patched task stores its payload whole), any
// other task's as stored.
func (c *Client) patchBase(ctx context.Context, t *Task) (json.RawMessage, error) {
	if engine.InputRef(t) == "" {
		return t.Payload, nil
	}
	inputs, err := c.store.RunInputsOfTasks(ctx, []string{t.ID})
	if err != nil {
		return nil, err
	}
	return patchInput(t, inputs)
}

// patchInput is patchBase's rule with the inputs read (RunInputsOfTasks).
func patchInput(t *Task, inputs map[string]json.RawMessage) (json.RawMessage, error) {
	p, err := engine.WithStepInput(t, inputs)
	if err != nil {
		return nil, unprocessable("patch: %v", err)
	}
	return p, nil
}
