package backstop

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/engine"
)

// TestTypedPayloadErrorNamesThePayload: a payload that does not fit a
// Typed handler dead-letters as poison with a message about the payload's
// JSON (field, what it is, what the kind expects), never the handler's Go
// type name (cli.imagePayload was shown to operators).
func TestTypedPayloadErrorNamesThePayload(t *testing.T) {
	type imagePayload struct {
		URL   string `json:"url"`
		Width int    `json:"width"`
	}
	h := Typed(func(context.Context, *Task, imagePayload) error { return nil })
	for _, tc := range []struct{ payload, want string }{
		{`{"url":"x","width":"wide"}`, `payload field "width" is a JSON string, but the resize_image handler expects an integer`},
		{`[1,2]`, `payload is a JSON array, but the resize_image handler expects an object`},
		{`{"width":`, `payload is not valid JSON`},
	} {
		err := h.Work(context.Background(), &Task{Kind: "resize_image", Payload: json.RawMessage(tc.payload)})
		if !engine.IsPoison(err) {
			t.Fatalf("%s: %v, want poison", tc.payload, err)
		}
		if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "imagePayload") || strings.Contains(msg, "backstop.") {
			t.Errorf("%s: %q, want %q and no Go type name", tc.payload, msg, tc.want)
		}
	}
}
