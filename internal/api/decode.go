package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
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
		return fail(codeInvalidJSON, taskjson.DescribeJSONError(err).Error())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fail(codeInvalidJSON, "unexpected data after the JSON object")
	}
	return nil
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
