package workflow

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/backstophq/backstop/store"
)

const fanOutYAML = `
name: fan
steps:
  - {id: a, kind: k}
  - {id: each, kind: k, needs: [a], for_each: input.xs}
  - {id: first, kind: k, for_each: input.ys}
`

// TestFanOutItemsReferTheInput: a fan-out item's stored payload holds its
// item, its index, the results it needs and the run's id, never the run's
// input; WithInput makes it the payload a handler receives, the same
// bytes a copy of the input would have stored.
func TestFanOutItemsReferTheInput(t *testing.T) {
	big := strings.Repeat("x", 20000)
	input := `{"big":"` + big + `","xs":[1,2,3],"ys":["p"]}`
	h := start(t, mustDef(t, fanOutYAML), input)
	h.succeed("run1.a", `{"n":7}`)
	h.wantPending("run1.each.0", "run1.each.1", "run1.each.2", "run1.first.0")
	for _, id := range []string{"run1.each.1", "run1.first.0"} {
		stored := h.tasks[id].Payload
		if len(stored) > 200 || strings.Contains(string(stored), big) {
			t.Fatalf("%s stores %d bytes: %.200s", id, len(stored), stored)
		}
		if got := InputRefOf(stored); got != "run1" {
			t.Fatalf("%s: InputRefOf = %q", id, got)
		}
	}
	got, err := WithInput(h.tasks["run1.each.1"].Payload, h.run.Input)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(map[string]any{"input": json.RawMessage(input), "results": map[string]any{"a": map[string]int{"n": 7}},
		"item": 2, "index": 1})
	if string(got) != string(want) {
		t.Fatalf("WithInput:\n%.300s\nwant\n%.300s", got, want)
	}
	// A step without for_each keeps its input (one copy per step).
	if p := h.payload("run1.a"); p["input"] == nil || p[InputRef] != nil {
		t.Fatalf("run1.a's payload: %v", p)
	}
	// A payload without a reference is left as it is.
	for _, p := range []string{`{"input":1}`, `[1]`, `"input_of_run"`, `{"input_of_run":3}`, `not json`} {
		if got, err := WithInput(json.RawMessage(p), json.RawMessage(`{}`)); err != nil || string(got) != p {
			t.Errorf("WithInput(%s) = %s, %v", p, got, err)
		}
	}
}

// TestFanOutBound: past Limits.FanOutBytes, a fan-out that starts with the
// run refuses the run (Start's *FanOutError: nothing to write); one that
// becomes ready later fails its step permanently, under its policy.
func TestFanOutBound(t *testing.T) {
	def := mustDef(t, fanOutYAML).WithLimits(Limits{FanOutBytes: 1000})
	wd := store.WorkflowDef{Name: "fan", Version: 1, PlanHash: def.Hash()}
	xs := `[` + strings.Repeat(`"abcdefghijklmnopqrstuvwxyz",`, 40) + `"z"]`

	_, err := Start(def, wd, "run1", json.RawMessage(`{"xs":[],"ys":`+xs+`}`), frozen)
	var fe *FanOutError
	if !errors.As(err, &fe) || fe.Step != "first" || fe.Items != 41 || fe.Bound != 1000 || fe.Bytes <= 1000 {
		t.Fatalf("Start: %v (%+v)", err, fe)
	}
	if !strings.Contains(err.Error(), "fan-out bound of 1000 bytes") {
		t.Fatalf("Start: %v", err)
	}

	// Within the bound at start; the later fan-out passes it.
	h := &harness{t: t, def: def, rows: map[rowKey]store.StepRecord{}, tasks: map[string]StepTask{}}
	p, err := Start(def, wd, "run1", json.RawMessage(`{"xs":`+xs+`,"ys":["p"]}`), frozen)
	if err != nil {
		t.Fatal(err)
	}
	h.apply(p)
	h.succeed("run1.a", "")
	if r := h.wantRow("each", 0, StepFailed); !strings.Contains(r.Error, "fan-out bound") {
		t.Fatalf("each: %+v", r)
	}
	if _, ok := h.tasks["run1.each.0"]; ok {
		t.Fatal("an item of the refused fan-out was enqueued")
	}
	h.succeed("run1.first.0", "")
	h.wantState(RunFailed)

	// The size counts the results the items carry, once per item.
	res := json.RawMessage(`{"a":` + strings.Repeat("1", 100) + `}`)
	one := FanOutSize("r", []json.RawMessage{json.RawMessage(`"i"`)}, res)
	payload, _ := json.Marshal(map[string]any{InputRef: "r", "results": res, "item": "i", "index": 0})
	if one != int64(len(payload)) {
		t.Fatalf("FanOutSize %d, the payload is %d bytes: %s", one, len(payload), payload)
	}
}

// FuzzWithInput: whatever a stored payload holds, WithInput either leaves
// it as it is (no reference) or answers an object with the input and
// without the reference.
func FuzzWithInput(f *testing.F) {
	for _, s := range []string{`{"input_of_run":"r","item":1,"index":0,"results":{}}`, `{"input_of_run":"r","input":2}`,
		`{"input_of_run":null}`, `{"a":"input_of_run"}`, `{"input_of_run":"r","input_of_run":"s"}`, `[]`, `{`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := WithInput(b, json.RawMessage(`{"k":1}`))
		if err != nil {
			return
		}
		if InputRefOf(b) == "" {
			if string(got) != string(b) {
				t.Fatalf("changed a payload without a reference: %q -> %q", b, got)
			}
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(got, &m); err != nil {
			t.Fatalf("%q -> %q: %v", b, got, err)
		}
		if _, ok := m[InputRef]; ok || m["input"] == nil {
			t.Fatalf("%q -> %q", b, got)
		}
	})
}
