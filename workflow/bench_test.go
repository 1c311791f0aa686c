package workflow

import (
	"encoding/json"
	"testing"

	"github.com/backstophq/backstop/store"
)

// BenchmarkParse: parse and validate a definition with expressions (what
// a caller pays to rebuild a definition from its stored canonical form;
// cache it by plan hash).
func BenchmarkParse(b *testing.B) {
	def := mustDefB(b, orderYAML)
	canon := def.Canonical()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(canon); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAdvanceLinear: one step of a 5-step linear run settles and the
// next is enqueued.
func BenchmarkAdvanceLinear(b *testing.B) {
	def := mustDefB(b, `
name: lin5
steps:
  - {id: s1, kind: k}
  - {id: s2, kind: k, needs: [s1]}
  - {id: s3, kind: k, needs: [s2]}
  - {id: s4, kind: k, needs: [s3]}
  - {id: s5, kind: k, needs: [s4]}
`)
	p, err := Start(def, store.WorkflowDef{}, "r1", json.RawMessage(`{"order":1}`), frozen)
	if err != nil {
		b.Fatal(err)
	}
	ch := []Change{{TaskID: "r1.s1", Outcome: Succeeded, Result: json.RawMessage(`{"ok":true}`)}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Advance(def, p.Run, p.Steps, ch, frozen); err != nil {
			b.Fatal(err)
		}
	}
}

func mustDefB(b *testing.B, s string) *Definition {
	d, err := Parse([]byte(s))
	if err != nil {
		b.Fatal(err)
	}
	return d
}
