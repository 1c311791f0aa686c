package backstop

import (
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"
)

// FuzzPatch: a replay patch (the CLI's path=VALUE and a merge patch) either
// is refused with ErrInvalid or yields a payload that is valid JSON and
// valid UTF-8, never a payload silently rewritten from invalid bytes.
func FuzzPatch(f *testing.F) {
	f.Add([]byte(`{"a":1,"b":{"c":[1,2]}}`), []byte(`{"x":null,"b":{"d":1}}`), "b.c.1=7")
	f.Add([]byte(`{}`), []byte(``), "a.b.c=hello")
	f.Add([]byte(`[1,2]`), []byte(`[3]`), "0=1")
	f.Add([]byte(`{"a":"s"}`), []byte(`{"a":{"b":1}}`), "a.b=2")
	f.Add([]byte(`{"a":1}`), []byte("{\"a\":\"\xff\"}"), "a=\xfe")
	f.Add([]byte(`{"a":1}`), []byte(`{}`), "a=\"\xff\"")
	f.Add([]byte(`{"a":1}`), []byte(`null`), "=1")
	f.Add([]byte(`{"a":1}`), []byte(`{"a":1}x`), "a..b=1")
	f.Fuzz(func(t *testing.T, payload, merge []byte, patch string) {
		if !json.Valid(payload) || !utf8.Valid(payload) {
			return // stored payloads were validated at enqueue
		}
		op, err := ParsePatch(patch)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParsePatch(%q): %v is not ErrInvalid", patch, err)
			}
			return
		}
		if !utf8.ValidString(op.Path) || !utf8.Valid(op.Value) || !json.Valid(op.Value) {
			t.Fatalf("ParsePatch(%q) = %q %q: not valid UTF-8 JSON", patch, op.Path, op.Value)
		}
		ops := []PatchOp{op}
		if err := checkPatch(merge, ops); err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("checkPatch(%q, %q): %v is not ErrInvalid", merge, patch, err)
			}
			return
		}
		out, err := applyPatch(payload, merge, ops)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("applyPatch(%q, %q, %q): %v is not ErrInvalid", payload, merge, patch, err)
			}
			return
		}
		if !json.Valid(out) || !utf8.Valid(out) {
			t.Fatalf("applyPatch(%q, %q, %q) = %q: not valid UTF-8 JSON", payload, merge, patch, out)
		}
	})
}

// FuzzCursor: a listing cursor is accepted only when it could be an id; a
// refusal is ErrInvalid on "after".
func FuzzCursor(f *testing.F) {
	for _, s := range []string{"", "t1", "01a20f33-7d42-7b3c-891f-7622a392f59e", "garbage", "\x00", "a b", "\xff",
		"host-123-0abc", "a:b.c_d-e", string(make([]byte, 129)), "é", "a\u0085"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for name, check := range map[string]func(string) error{"task": checkTaskCursor, "worker": checkWorkerCursor} {
			err := check(s)
			if err != nil {
				var ve *ValidationError
				if !errors.Is(err, ErrInvalid) || !errors.As(err, &ve) || ve.Field != "after" {
					t.Fatalf("%s cursor %q: %v is not ErrInvalid on after", name, s, err)
				}
				continue
			}
			if !utf8.ValidString(s) || len(s) > 255 {
				t.Fatalf("%s cursor %q accepted", name, s)
			}
			for _, r := range s {
				if r < 0x20 || r == 0x7f {
					t.Fatalf("%s cursor %q with a control character accepted", name, s)
				}
			}
			if name == "task" && s != "" && ValidID(s) != nil {
				t.Fatalf("task cursor %q that is not an id accepted", s)
			}
		}
	})
}
