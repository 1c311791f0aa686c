package api

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// FuzzBodyTimes: decoding a redrive, close or task action request never panics; a
// refusal that names a field names a time field whose value is not a time,
// and the detail starts with that field.
func FuzzBodyTimes(f *testing.F) {
	for _, b := range []string{
		`{"since":"yesterday"}`, `{"until":12}`, `{"snapshot":"not a time"}`, `{"since":null}`,
		`{"since":"2030-01-02T15:04:05Z","until":"2030-13-01T00:00:00Z"}`, `{"status":"resolved","snapshot":{}}`,
		`{"since":"` + strings.Repeat("9", 200) + `"}`, `{"run_at":"soon"}`, `{"queue":1,"since":"x"}`, `{"since":"x",}`,
	} {
		f.Add(b)
	}
	times := map[string]bool{"since": true, "until": true, "snapshot": true, "run_at": true}
	f.Fuzz(func(t *testing.T, body string) {
		for _, v := range []any{&RedriveRequest{}, &CloseRequest{}, &TaskJobRequest{}} {
			err := decodeStrict([]byte(body), v)
			var ae *apiError
			if err == nil || !errors.As(err, &ae) || ae.field == "" {
				continue
			}
			if !times[ae.field] || !strings.HasPrefix(ae.detail, ae.field+": want an RFC 3339 time") {
				t.Fatalf("%s into %T: field %q, detail %q", body, v, ae.field, ae.detail)
			}
			var m map[string]json.RawMessage
			if json.Unmarshal([]byte(strings.TrimSpace(body)), &m) != nil {
				t.Fatalf("%s: a field named in a body that is not an object", body)
			}
			var tt time.Time
			if json.Unmarshal(m[ae.field], &tt) == nil {
				t.Fatalf("%s: %s named though it is a time", body, ae.field)
			}
		}
	})
}
