package taskjson

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeRun: any line either decodes or is refused with an error,
// never a panic; a decoded run came from a UTF-8 JSON object, and its
// input, when given, is the JSON the line held under "input".
func FuzzDecodeRun(f *testing.F) {
	for _, s := range []string{
		`{"workflow":"ship","input":{"to":"x"},"run_id":"r-1","version":2,"trace":true}`,
		`{"workflow":"ship"}`,
		`{"workflow":"ship","input":null}`,
		`{"workflow":"ship","extra":1}`,
		`{"workflow":"ship"} {}`,
		`[1]`,
		`{"workflow":"\xff"}`,
		`{"version":"2"}`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		p, err := DecodeRun(line)
		if err != nil {
			return
		}
		line = bytes.TrimSpace(line) // as DecodeRun trims it
		if !utf8.Valid(line) || !json.Valid(line) {
			t.Fatalf("decoded %q, which is not UTF-8 JSON: %+v", line, p)
		}
		if len(p.Input) > 0 && !json.Valid(p.Input) {
			t.Fatalf("input %q of %q is not JSON", p.Input, line)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("decoded %q, which is not an object: %v", line, err)
		}
		for k := range m {
			switch strings.ToLower(k) { // encoding/json matches keys case-insensitively

			case "workflow", "version", "input", "run_id", "trace":
			default:
				t.Fatalf("decoded %q with the unknown key %q", line, k)
			}
		}
	})
}

// TestDecodeRun: the keys decode; unknown keys, trailing data and bad
// types are refused naming what is wrong.
func TestDecodeRun(t *testing.T) {
	p, err := DecodeRun([]byte(` {"workflow":"ship","input":{"to":"x"},"run_id":"r-1","version":2,"trace":true} `))
	if err != nil || p.Workflow != "ship" || string(p.Input) != `{"to":"x"}` || p.RunID != "r-1" || p.Version != 2 || !p.Trace {
		t.Fatalf("%+v %v", p, err)
	}
	for line, want := range map[string]string{
		`{"workflow":"ship","extra":1}`: `unknown key "extra"`,
		`{"workflow":"ship"} {}`:        "unexpected data",
		`{"version":"2"}`:               "version: want a JSON number",
		`[]`:                            "want a JSON object",
		"{\"workflow\":\"\xff\"}":       "not valid UTF-8",
		`{"workflow":`:                  "incomplete",
	} {
		if _, err := DecodeRun([]byte(line)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v; want %q", line, err, want)
		}
	}
}
