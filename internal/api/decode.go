package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/backstophq/backstop/internal/taskjson"
)

// readBody reads a JSON request body (bounded by the body limit).
func readBody(r *http.Request) ([]byte, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && mt != "application/problem+json") {
			return nil, fail(codeUnsupportedMedia, "send Content-Type: application/json")
		}
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, err
		}
		return nil, fail(codeInvalidJSON, "reading the body: "+err.Error())
	}
	// JSON text is UTF-8 (RFC 8259), and encoding/json does not check it:
	// a payload with invalid bytes would be stored and served back raw.
	if !utf8.Valid(b) {
		return nil, fail(codeInvalidJSON, fmt.Sprintf("the body is not valid UTF-8 (first bad byte at offset %d); JSON text must be UTF-8", taskjson.BadUTF8(b)))
	}
	return b, nil
}

// decodeJSON decodes a request body into v strictly: one JSON object,
// unknown keys refused, nothing after it.
func decodeJSON(r *http.Request, v any) error {
	b, err := readBody(r)
	if err != nil {
		return err
	}
	return decodeStrict(b, v)
}

func decodeStrict(b []byte, v any) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return fail(codeInvalidJSON, "want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if field, got := badTimeField(b, v); field != "" {
			return &apiError{code: codeInvalidJSON, field: field,
				detail: fmt.Sprintf("%s: want an RFC 3339 time such as 2030-01-02T15:04:05Z, got %s", field, got)}
		}
		return fail(codeInvalidJSON, taskjson.DescribeJSONError(err).Error())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fail(codeInvalidJSON, "unexpected data after the JSON object")
	}
	return nil
}

// badTimeField names the top-level key of b whose value is not a time
// though v's field for it is one (time.Time or *time.Time; embedded
// structs' fields too), and the value: encoding/json's error for it
// names neither.
func badTimeField(b []byte, v any) (field, got string) {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return "", ""
	}
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return "", ""
	}
	timeType := reflect.TypeFor[time.Time]()
	for _, f := range reflect.VisibleFields(t) {
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft != timeType || !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		raw, ok := m[name]
		if !ok || string(raw) == "null" {
			continue
		}
		var tt time.Time
		if json.Unmarshal(raw, &tt) != nil {
			if len(raw) > 64 {
				raw = append(raw[:64:64], "..."...)
			}
			return name, string(raw)
		}
	}
	return "", ""
}

// writeJSON writes a response body.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
	return nil
}
