package pgstore

import (
	"bytes"
	"encoding/json"
	"testing"
)

// compactJSON must give json.Compact's result on every valid document.
func FuzzCompactJSON(f *testing.F) {
	for _, s := range []string{
		`{"execution_id" : "a b", "attempt" : 1, "worker_id" : "w"}`,
		`{"error" : "say \"hi\" \\ then\n tab\t", "x" : [1, 2, {"y" : null}]}`,
		"{\n\t\"a\" :\r\n true }",
		`"just a string with  spaces"`,
		`{}`, `[]`, `null`, `{"k" : "\\"}`, `{"k" : "\\\" x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		if !json.Valid(src) {
			return
		}
		var want bytes.Buffer
		if err := json.Compact(&want, src); err != nil {
			t.Fatal(err)
		}
		if got := compactJSON(src); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("compactJSON(%q) = %q, want %q", src, got, want.Bytes())
		}
	})
}
