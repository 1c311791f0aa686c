package taskjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/backstophq/backstop"
)

// runRecord is one run to start as a batch start describes it (an NDJSON
// line of `workflows run --batch-file`, or one run of POST /v1/runs/batch).
type runRecord struct {
	Workflow string          `json:"workflow"`
	Version  int             `json:"version"`
	Input    json.RawMessage `json:"input"`
	RunID    string          `json:"run_id"`
	Trace    bool            `json:"trace"`
}

// DecodeRun decodes one run object: {workflow, version, input, run_id,
// trace}. Unknown keys, trailing data, bytes that are not UTF-8 and
// anything but a JSON object are errors; the library validates the
// values (RunWorkflows).
func DecodeRun(line []byte) (backstop.RunWorkflowParams, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return backstop.RunWorkflowParams{}, errors.New("want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var r runRecord
	if err := dec.Decode(&r); err != nil {
		return backstop.RunWorkflowParams{}, DescribeJSONError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return backstop.RunWorkflowParams{}, errors.New("unexpected data after the JSON object")
	}
	if !utf8.Valid(line) {
		if !utf8.Valid(r.Input) {
			return backstop.RunWorkflowParams{}, errors.New("input: is not valid UTF-8 (JSON text must be UTF-8)")
		}
		return backstop.RunWorkflowParams{}, fmt.Errorf("the record is not valid UTF-8 (first bad byte at offset %d); JSON text must be UTF-8", BadUTF8(line))
	}
	return backstop.RunWorkflowParams{Workflow: r.Workflow, Version: r.Version, Input: r.Input, RunID: r.RunID, Trace: r.Trace}, nil
}
