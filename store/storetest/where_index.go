package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/filter"
	"github.com/backstophq/backstop/store"
)

// whereIndexPayloads are payloads where a JSON index of the payload and
// the where's own reading may part ways: escapes (of a surrogate pair, of
// a letter past ASCII, in a key), numbers spelt with an exponent, trailing
// zeros or more digits than a double holds, text that looks like such a
// number, values of every type at a path, arrays and scalars where an object is expected, and a spilled
// payload.
var whereIndexPayloads = []string{
	`{"v":1}`, `{"v":2}`, `{"v":1.0}`, `{"v":1e0}`, `{"v":100}`, `{"v":1e2}`, `{"v":100.000000000000000}`,
	`{"v":1.5}`, `{"v":1.50}`, `{"v":0.1}`, `{"v":0.10000000000000001}`, `{"v":0}`, `{"v":-0}`,
	`{"v":12345678901234567}`, `{"v":12345678901234568}`, `{"v":123456789012345}`,
	`{"v":"é"}`, `{"v":"\u00e9"}`, `{"v":"a😀"}`, `{"v":"a\ud83d\ude00"}`, `{"v":"x"}`, `{"v":"x", "w":"a, 1e5"}`,
	`{"v":"1"}`, `{"v":true}`, `{"v":false}`, `{"v":null}`, `{}`, `{"v":[1]}`, `{"v":{"v":1}}`,
	`{"o":{"v":1}}`, `{"o":{"v":"x"}}`, `{"o":{"v":true}}`, `{"o":{"v":null}}`, `{"o":[{"v":1}]}`, `{"o":1}`,
	`[{"v":1}]`, `[1]`, `"x"`, `1`, `null`, `true`,
	`{"a b":1}`, `{"\u00e9":1}`, `{"é":2}`, `{"o":{"v":1e400}, "v":1}`, `{"v":1, "o":{"v":5e-324}}`,
	`{"v":1.0000000000000001}`, `{"v":9007199254740993}`, `{"v":1e-400}`, `{"v":1E+0}`,
}

// whereIndexLits are the literals the corpus compares them with.
var whereIndexLits = []string{`1`, `2`, `100`, `1.5`, `0.1`, `0`, `-0.0`, `12345678901234567`, `123456789012345`,
	`"é"`, `"a😀"`, `"x"`, `"1"`, `true`, `false`, `null`}

// testWhereIndex: the conditions a store may answer through an index of
// the dead letters' payloads (== and in on payload paths, and && or || of
// them) select what the Go path selects, on dead letters whose payloads
// are chosen to trip an index of the payload as JSON (docs/api.md,
// "Indexed on Postgres").
func (s *suite) testWhereIndex(t *testing.T) {
	t.Parallel()
	b := s.setup(t, &backstop.Config{InlinePayloadLimit: 64})
	for i, p := range whereIndexPayloads {
		b.enqueue(backstop.EnqueueParams{ID: fmt.Sprintf("x-%02d", i), Queue: "wix", Kind: "k", Payload: json.RawMessage(p)})
	}
	// Spilled (past the inline limit), one matching and one not.
	pad := strings.Repeat("p", 80)
	b.enqueue(backstop.EnqueueParams{ID: "x-spilled-1", Queue: "wix", Kind: "k", Payload: json.RawMessage(`{"v":1,"o":{"v":"x"},"pad":"` + pad + `"}`)})
	b.enqueue(backstop.EnqueueParams{ID: "x-spilled-2", Queue: "wix", Kind: "k", Payload: json.RawMessage(`{"v":2,"o":{"v":true},"pad":"` + pad + `"}`)})
	b.kill("wix", "boom")
	var corpus []string
	for _, l := range whereIndexLits {
		for _, p := range []string{`payload.v`, `payload.o.v`, `payload["a b"]`, `payload["é"]`} {
			corpus = append(corpus, p+" == "+l, l+" == "+p, p+" in ["+l+", 2]")
		}
		corpus = append(corpus,
			`payload.v == `+l+` && payload.o.v == `+l,
			`payload.v == `+l+` && has(payload.o)`,
			`payload.v == `+l+` || payload.o.v == `+l,
			`(payload.v == `+l+` || payload.o.v in [`+l+`, "x"]) && !(payload.v == 2)`)
	}
	matched := 0 // expressions that select something
	for _, w := range corpus {
		x, err := filter.Compile(w)
		if err != nil || !x.InSQL() {
			t.Fatalf("%q: %v, in SQL %v", w, err, err == nil && x.InSQL())
		}
		f := store.ListFilter{Queue: "wix", States: []bt.State{bt.StateDead}, Where: w, Limit: 1000, WithoutPayload: true}
		got, err := b.store.List(b.ctx, f)
		if err != nil {
			t.Fatalf("where %q in SQL: %v", w, err)
		}
		inGo, err := filter.Scan(b.ctx, x, f, b.store.List)
		if err != nil {
			t.Fatalf("where %q in Go: %v", w, err)
		}
		sqlIDs, goIDs := []string{}, []string{}
		for _, tk := range got {
			sqlIDs = append(sqlIDs, tk.ID)
		}
		for _, tk := range inGo {
			goIDs = append(goIDs, tk.ID)
		}
		if !slices.Equal(sqlIDs, goIDs) {
			t.Errorf("where %q: SQL selects %v, Go %v", w, sqlIDs, goIDs)
		}
		if len(goIDs) > 0 {
			matched++
		}
	}
	if matched*3 < len(corpus) {
		t.Fatalf("%d of the corpus's %d expressions select something: too few to tell", matched, len(corpus))
	}
	// A few answers, pinned.
	for w, want := range map[string][]string{
		`payload.v == 100`:  {`{"v":100}`, `{"v":1e2}`, `{"v":100.000000000000000}`},
		`payload.v == "é"`:  {`{"v":"é"}`, `{"v":"\u00e9"}`},
		`payload.v == 2`:    {`{"v":2}`, "spilled-2"},
		`payload.o.v == 1`:  {`{"o":{"v":1}}`},
		`payload["é"] == 2`: {`{"é":2}`},
	} {
		var wantIDs []string
		for _, p := range want {
			if strings.HasPrefix(p, "spilled") {
				wantIDs = append(wantIDs, "x-"+p)
				continue
			}
			wantIDs = append(wantIDs, fmt.Sprintf("x-%02d", slices.Index(whereIndexPayloads, p)))
		}
		slices.Sort(wantIDs)
		got, err := b.store.List(b.ctx, store.ListFilter{Queue: "wix", States: []bt.State{bt.StateDead}, Where: w, Limit: 1000, WithoutPayload: true})
		if err != nil {
			t.Fatal(err)
		}
		gotIDs := []string{}
		for _, tk := range got {
			gotIDs = append(gotIDs, tk.ID)
		}
		eq(t, w, gotIDs, wantIDs)
	}
}
