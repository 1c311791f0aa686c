package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/filter"
	"github.com/backstophq/backstop/store"
)

// whereNumbers are payload numbers where exact decimals, doubles, int64
// and the stores' own readings part ways: around 2^53, past 1 by less
// than a double's step, beyond the double range (1e400: SQLite and
// Postgres hold it, Go's encoding/json refuses it), too small for a
// double, ties of rounding, and spellings of the same number. Not here:
// a decimal of more than 19 significant digits within 10^-19 of halfway
// between two doubles, which SQLite's own reading may round the other way
// (docs/api.md says so).
var whereNumbers = []string{
	"0", "-0", "1", "1.0", "1E+0", "0.1e1", "1.0000000000000001", "1.0000000000000002", "0.9999999999999999",
	"9007199254740992", "9007199254740993", "9007199254740994", "9007199254740995",
	"0.1", "0.30000000000000004", "1e23", "100000000000000000000000", "123456789012345678901234567890",
	"9223372036854775807", "9223372036854775808", "-9223372036854775809", "18446744073709551616",
	"1e308", "1.7976931348623157e308", "1.7976931348623158e308", "1.7976931348623159e308",
	"9007199254740993.0", "1.00000000000000011102230246251565404236316680908203125",
	"1e400", "-1e400", "1e-400", "5e-324", "2.4703282292062328e-324", "2.4703282292062327e-324", "-2.5",
}

// whereNumberLits are the literals the corpus compares them with.
var whereNumberLits = []string{
	"0", "-0.0", "1", "1.0", "1.0000000000000001", "1.0000000000000002", "9007199254740992", "9007199254740993",
	"9007199254740994u", "0.1", "0.30000000000000004", "1e23", "9223372036854775807", "-9223372036854775808",
	"18446744073709551615u", "1e308", "1.7976931348623157e308", "5e-324", "-2.5", "100",
}

// testWhereNumbers: one numeric model whichever path evaluates a where
// (internal/filter number.go: every number is its nearest double, beyond
// the range ±infinity, too small 0): for a corpus of expressions over the
// numbers above, the store's SQL and the Go path (filter.Scan over the
// same store) select identical ids, and a few answers are pinned.
func (s *suite) testWhereNumbers(t *testing.T) {
	t.Parallel()
	b := s.setup(t, &backstop.Config{InlinePayloadLimit: 64})
	ids := map[string]string{}
	for i, n := range whereNumbers {
		id := fmt.Sprintf("n-%02d", i)
		ids[n] = id
		payload := json.RawMessage(`{"n":` + n + `,"a":{"n":` + n + `}}`)
		if i%4 == 0 { // spilled
			payload = json.RawMessage(`{"n":` + n + `,"a":{"n":` + n + `},"pad":"` + fmt.Sprintf("%080d", i) + `"}`)
		}
		b.enqueue(backstop.EnqueueParams{ID: id, Queue: "num", Kind: "k", Payload: payload})
	}
	b.enqueue(backstop.EnqueueParams{ID: "n-str", Queue: "num", Kind: "k", Payload: json.RawMessage(`{"n":"1","a":{"n":true}}`)})
	var corpus []string
	for _, l := range whereNumberLits {
		for _, op := range []string{"==", "!=", "<", "<=", ">", ">="} {
			corpus = append(corpus, "payload.n "+op+" "+l, l+" "+op+" payload.a.n")
		}
		corpus = append(corpus, "payload.n in ["+l+", 2]", "!(payload.a[\"n\"] == "+l+") && payload.n >= "+l)
	}
	sel := func(w string) (sqlIDs, goIDs []string) {
		t.Helper()
		x, err := filter.Compile(w)
		if err != nil || !x.InSQL() {
			t.Fatalf("%q: %v, in SQL %v", w, err, err == nil && x.InSQL())
		}
		f := store.ListFilter{Queue: "num", Where: w, Limit: 1000, WithoutPayload: true}
		got, err := b.store.List(b.ctx, f)
		if err != nil {
			t.Fatalf("where %q in SQL: %v", w, err)
		}
		inGo, err := filter.Scan(b.ctx, x, f, b.store.List)
		if err != nil {
			t.Fatalf("where %q in Go: %v", w, err)
		}
		sqlIDs, goIDs = []string{}, []string{}
		for _, tk := range got {
			sqlIDs = append(sqlIDs, tk.ID)
		}
		for _, tk := range inGo {
			goIDs = append(goIDs, tk.ID)
		}
		return sqlIDs, goIDs
	}
	for _, w := range corpus {
		sqlIDs, goIDs := sel(w)
		if !slices.Equal(sqlIDs, goIDs) {
			t.Errorf("where %q: SQL selects %v, Go %v", w, sqlIDs, goIDs)
		}
	}
	// The model's answers, pinned (the disagreements among them).
	for w, want := range map[string][]string{
		`payload.n == 9007199254740993`:      {"9007199254740992", "9007199254740993", "9007199254740993.0"},
		`payload.n == 1.0 && payload.n >= 1`: {"1", "1.0", "1E+0", "0.1e1", "1.0000000000000001", "1.00000000000000011102230246251565404236316680908203125"},
		`payload.n > 1.7976931348623157e308`: {"1.7976931348623159e308",
			"1e400"},
		`payload.n == 0`:                  {"0", "-0", "1e-400", "2.4703282292062327e-324"},
		`payload.n == 9007199254740994u`:  {"9007199254740994"},
		`payload.n == 9007199254740996.0`: {"9007199254740995"},
	} {
		var wantIDs []string
		for _, n := range want {
			wantIDs = append(wantIDs, ids[n])
		}
		slices.Sort(wantIDs)
		sqlIDs, goIDs := sel(w)
		eq(t, "SQL: "+w, sqlIDs, wantIDs)
		eq(t, "Go: "+w, goIDs, wantIDs)
	}
}
