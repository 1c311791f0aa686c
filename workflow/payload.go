package workflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// InputRef is the key that stands for the run's input in the stored
// payload of a fan-out item: {"input_of_run": "<run id>", "results": ...,
// "item": ..., "index": 3}. The items of a fan-out do not each copy the
// run's input; whoever hands the task to a handler puts the input back
// (WithInput), so the handler receives the payload docs/workflows.md
// describes.
const InputRef = "input_of_run"

// Limits bound what one run may write. The zero value bounds nothing.
type Limits struct {
	// FanOutBytes bounds the payload bytes of one fan-out step's items,
	// all items together (FanOutSize). A for_each past it refuses the run
	// when the step starts with the run (Start: a *FanOutError), and fails
	// the step permanently when it becomes ready later.
	FanOutBytes int64
}

// WithLimits returns a copy of d whose runs are bound by l.
func (d *Definition) WithLimits(l Limits) *Definition {
	c := *d
	c.limits = l
	return &c
}

// FanOutError is a fan-out past Limits.FanOutBytes.
type FanOutError struct {
	Step  string
	Items int
	// Bytes is FanOutSize's estimate; Bound is Limits.FanOutBytes.
	Bytes, Bound int64
}

func (e *FanOutError) Error() string {
	return fmt.Sprintf("step %q: for_each: %d items of %d bytes in all pass the fan-out bound of %d bytes",
		e.Step, e.Items, e.Bytes, e.Bound)
}

// FanOutSize is the payload bytes the items of a fan-out store, all items
// together: each holds its item, its index, the results of the steps it
// needs (encoded once, in results) and the run's id (never its input).
func FanOutSize(runID string, items []json.RawMessage, results json.RawMessage) int64 {
	// {"index":N,"input_of_run":"<id>","item":<item>,"results":<results>}
	per := int64(len(`{"index":,"`+InputRef+`":"","item":,"results":}`) + len(runID) + len(results))
	n := int64(0)
	for i, it := range items {
		n += per + int64(len(it)) + int64(len(strconv.Itoa(i)))
	}
	return n
}

// InputRefOf reports the run id a stored step payload refers to for its
// input ("" when the payload holds its input, or is not a step's).
func InputRefOf(payload json.RawMessage) string {
	if !bytes.Contains(payload, []byte(`"`+InputRef+`"`)) {
		return ""
	}
	var p struct {
		Run *string `json:"input_of_run"`
	}
	if json.Unmarshal(payload, &p) != nil || p.Run == nil {
		return ""
	}
	return *p.Run
}

// WithInput is a stored step payload with the run's input in place of its
// reference: the payload the step's handler receives. A payload without a
// reference is returned as it is. A stored "input" (a replay's patch put
// one there) is kept as it is.
func WithInput(payload, input json.RawMessage) (json.RawMessage, error) {
	if InputRefOf(payload) == "" {
		return payload, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(payload, &m); err != nil {
		return nil, err
	}
	delete(m, InputRef)
	if _, ok := m["input"]; !ok {
		if len(input) == 0 {
			input = json.RawMessage("null")
		}
		m["input"] = input
	}
	return json.Marshal(m)
}
