package redact_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/backstophq/backstop/redact"
)

func TestLine(t *testing.T) {
	m := redact.New([]string{"ssn"})
	for _, c := range []struct{ in, want string }{
		{"nothing to see here", "nothing to see here"},
		{"login user=bob password=hunter2 ok", "login user=bob password=[REDACTED] ok"},
		{`INFO connect db_password="s3cret value" host=db`, `INFO connect db_password="[REDACTED]" host=db`},
		{"GET /x?token=abc&page=2", "GET /x?token=[REDACTED]&page=2"},
		{"Authorization: Basic dXNlcjpwYXNz", "Authorization: [REDACTED]"},
		{"curl -H 'Authorization: Bearer abc.def' x", "curl -H 'Authorization: [REDACTED]' x"},
		{"sent with Bearer eyJhbGciOi", "sent with Bearer [REDACTED]"},
		{"ssn=123-45-6789, name=ann", "ssn=[REDACTED], name=ann"},
		{`auth={"user":"a","pass":"b"} done`, `auth=[REDACTED] done`},
		{`{"level":"info","msg":"hi","api_key":"k1","n":1}`, `{"level":"info","msg":"hi","api_key":"[REDACTED]","n":1}`},
		{`2026-11-21 app: {"msg":"retry with password=abc","x":{"Secret":[1,2]}}`,
			`2026-11-21 app: {"msg":"retry with password=[REDACTED]","x":{"Secret":"[REDACTED]"}}`},
		{`text {"token": "t" but not json`, `text {"token": "[REDACTED]" but not json`},
		{"time=2026-11-21T10:00:00Z level=INFO", "time=2026-11-21T10:00:00Z level=INFO"},
	} {
		if got := m.Line(c.in); got != c.want {
			t.Errorf("Line(%q)\n = %q\nwant %q", c.in, got, c.want)
		}
		if got := m.Line(m.Line(c.in)); got != m.Line(c.in) {
			t.Errorf("Line not idempotent on %q: %q", c.in, got)
		}
	}
	if got := m.Text("a=1\npassword=x\n"); got != "a=1\npassword=[REDACTED]\n" {
		t.Errorf("Text: %q", got)
	}
}

// FuzzLine: Line never panics, is idempotent, keeps a JSON record valid
// JSON, and a planted key=secret never survives whatever surrounds it
// (unless the line is one JSON document whose strings hide it escaped).
func FuzzLine(f *testing.F) {
	for _, s := range []string{"", "password=x", `{"token":"t"}`, "a: b, auth: c", `x "secret": {"a":[1]} y`,
		"Bearer", "bearer  t", `p {"m":"auth={\"a\"}"}`, "k='v", "password=\"unterminated", "{]"} {
		f.Add(s, "pre", "post")
	}
	m := redact.New(nil)
	f.Fuzz(func(t *testing.T, line, pre, post string) {
		out := m.Line(line)
		if again := m.Line(out); again != out {
			t.Fatalf("not idempotent: %q -> %q -> %q", line, out, again)
		}
		if i := strings.IndexByte(line, '{'); i >= 0 && json.Valid([]byte(line[i:])) {
			if j := strings.IndexByte(out, '{'); !json.Valid([]byte(out[max(j, 0):])) && out[i:] != redact.Mask {
				t.Fatalf("JSON record %q masked into invalid JSON %q", line, out)
			}
		}
		// Plant a secret between arbitrary text, separated by spaces.
		const secret = "Zq9SeCrEtVaLuE"
		if strings.ContainsAny(pre+post, "\"'\\{[") || strings.Contains(pre+post, secret) {
			return
		}
		planted := pre + " password=" + secret + " " + post
		if got := m.Line(planted); strings.Contains(got, secret) {
			t.Fatalf("secret survived: %q -> %q", planted, got)
		}
	})
}
