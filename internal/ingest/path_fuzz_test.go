package ingest

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
)

// A field path parses or is refused with an error naming it; an accepted
// path finds a value put where it points, in a document built for it; the
// extractor never panics on any document, and Int agrees with Text; a
// message either maps to a task with a valid id or is refused with a
// reason.
func FuzzPath(f *testing.F) {
	for _, s := range [][2]string{
		{"check.id", `{"check":{"id":"c-1","minute":60000}}`},
		{"$.check.id", `{"check":{"id":42}}`},
		{"results[0].minute", `{"results":[{"minute":"17"}]}`},
		{"$.a.b[2][0].c", `{"a":{"b":[0,1,[{"c":true}]]}}`},
		{"a..b", `{}`}, {"$.", `{}`}, {"$", `1`}, {".a", `{}`}, {"a.", `{}`}, {"a[", `{}`}, {"a[x]", `{}`},
		{"a[-1]", `{}`}, {"a]b", `{}`}, {"a b", `{}`}, {"[0]", `[1]`}, {"$[0]", `[1]`}, {"a[1]x", `{}`},
		{"é.ü", `{"é":{"ü":"x"}}`}, {"a", `not json`}, {"a", `{"a":1} {"a":2}`}, {"a", `{"a":1.5}`}, {"a", `{"a":null}`},
		{"a", `{"a":"99999999999999999999"}`}, {strings.Repeat("a.", 40) + "a", `{}`},
	} {
		f.Add(s[0], []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, raw string, doc []byte) {
		p, err := ParsePath(raw)
		if err != nil {
			if !strings.Contains(err.Error(), strconv.Quote(raw)) {
				t.Fatalf("%q: error %q does not name the path", raw, err)
			}
		} else {
			if p.String() != raw || len(p.steps) == 0 || len(p.steps) > MaxPathDepth || len(raw) > MaxPathLen {
				t.Fatalf("%q: accepted as %q with %d steps", raw, p, len(p.steps))
			}
			if built, ok := build(p.steps, "found"); ok {
				if v, ok := p.Lookup(built); !ok || v != "found" {
					t.Fatalf("%q: lookup in %v gave %v, %v", raw, built, v, ok)
				}
			}
		}
		v, derr := Decode(doc)
		if derr == nil && !json.Valid(doc) {
			t.Fatalf("%q decoded but is not valid JSON", doc)
		}
		if p != nil && derr == nil {
			_, _ = p.Lookup(v)
			text, terr := p.Text(v)
			n, ierr := p.Int(v)
			if tn, err := strconv.ParseInt(text, 10, 64); ierr == nil && (terr != nil || err != nil || tn != n) {
				t.Fatalf("%q in %q: Int %d but Text %q, %v", raw, doc, n, text, terr)
			}
		}
		if p == nil {
			return
		}
		m := Mapping{Queue: "q", Kind: "k", IDField: p, OrderingKeyField: p, SequenceField: p}
		params, err := m.Task(&Message{Value: doc, Position: Position{Broker: "kafka", Topic: "t", Offset: 1}})
		var r *Refusal
		switch {
		case errors.As(err, &r):
			if r.Reason == "" || r.Err == nil {
				t.Fatalf("refusal without a reason: %+v", r)
			}
		case err != nil:
			t.Fatalf("not a refusal: %v", err)
		default:
			if backstop.ValidID(params.ID) != nil || params.OrderingKey == "" {
				t.Fatalf("mapped to %+v", params)
			}
		}
	})
}

// build makes a document holding leaf where steps point (nil, false when
// an index is too large to build).
func build(steps []step, leaf any) (any, bool) {
	v := leaf
	for i := len(steps) - 1; i >= 0; i-- {
		s := steps[i]
		if s.key != "" {
			v = map[string]any{s.key: v}
			continue
		}
		if s.index > 1000 {
			return nil, false
		}
		a := make([]any, s.index+1)
		a[s.index] = v
		v = a
	}
	return v, true
}
