package workflow

import (
	"encoding/json"
	"strings"
	"testing"

	"cel.dev/cel-go/common/types"
)

// TestExpressions evaluates when and for_each over JSON input and results
// the way the engine does.
func TestExpressions(t *testing.T) {
	input := json.RawMessage(`{"amount":150,"n":3,"users":[{"email":"a@x","active":true},{"email":"b@x","active":false}],"tags":{"vip":true}}`)
	results := map[string]json.RawMessage{"check": json.RawMessage(`{"ok":true,"score":0.5}`), "fan": json.RawMessage(`[1,2]`), "none": json.RawMessage(`null`)}
	vars, err := exprVars(input, results)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		expr string
		want bool
		err  string
	}{
		{expr: "input.amount > 100", want: true},
		{expr: "input.amount == 150", want: true},
		{expr: "input.n >= 3 && results.check.ok", want: true},
		{expr: "results.check.score < 1", want: true},
		{expr: "size(results.fan) == 2", want: true},
		{expr: "results.none == null", want: true},
		{expr: "'vip' in input.tags && input.tags.vip", want: true},
		{expr: "input.users.exists(u, u.email == 'b@x' && !u.active)", want: true},
		{expr: "has(input.missing)", want: false},
		{expr: "input.missing", err: "no such key"},
		{expr: "input.amount", err: "not a bool"},
	} {
		p, err := compileExpr(tc.expr, types.BoolKind)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		got, err := evalWhen(p, vars)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.expr, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s = %v, %v; want %v", tc.expr, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ expr, want, err string }{
		{expr: "input.users.map(u, u.email)", want: `["a@x","b@x"]`},
		{expr: "input.users.filter(u, u.active)", want: `[{"active":true,"email":"a@x"}]`},
		{expr: "[1, 2.5, 'x', true, null, {'k': [1]}]", want: `[1,2.5,"x",true,null,{"k":[1]}]`},
		{expr: "results.fan", want: `[1,2]`},
		{expr: "[]", want: `[]`},
		{expr: "input.tags", err: "not a list"},
		{expr: "[duration('1s')]", want: `["1s"]`},
		{expr: "input.users.map(u, input.users.map(v, input.users.map(w, [u, v, w])))", want: ""},
	} {
		p, err := compileExpr(tc.expr, types.ListKind)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		items, err := evalForEach(p, vars)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.expr, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		b, _ := json.Marshal(items)
		if tc.want != "" && string(b) != tc.want {
			t.Errorf("%s = %s, want %s", tc.expr, b, tc.want)
		}
	}
}

// TestExpressionCostLimit: an evaluation that exceeds the cost limit fails
// (and so fails the step) rather than running on.
func TestExpressionCostLimit(t *testing.T) {
	p, err := compileExpr("[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, a+b+c+d+e+f > 0))))))", types.BoolKind)
	if err != nil {
		t.Fatal(err)
	}
	vars, _ := exprVars(nil, nil)
	if _, err := evalWhen(p, vars); err == nil || !strings.Contains(err.Error(), "cost") {
		t.Fatalf("err = %v", err)
	}
}
