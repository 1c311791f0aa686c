package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"google.golang.org/protobuf/types/known/structpb"
)

// Expressions (a step's when and for_each) are CEL (cel.dev/cel-go), with
// two variables of type dyn: input (the run's input) and results (a map
// from each step the step needs to its result; a fan-out step's result is
// the list of its items' results). when evaluates to a bool, for_each to a
// list.

// exprCostLimit bounds one evaluation (CEL's cost units: about one per
// operation or element visited); past it the evaluation fails, and so does
// the step.
const exprCostLimit = 1_000_000

var (
	envOnce sync.Once
	celEnv  *cel.Env
	envErr  error
)

func exprEnv() (*cel.Env, error) {
	envOnce.Do(func() {
		celEnv, envErr = cel.NewEnv(
			cel.Variable("input", cel.DynType),
			cel.Variable("results", cel.DynType),
		)
	})
	return celEnv, envErr
}

// compiled is a definition's expressions, compiled once by Validate.
type compiled struct {
	when    map[string]cel.Program
	forEach map[string]cel.Program
}

// compile checks and compiles every when and for_each of d.
func compile(d *Definition) (*compiled, error) {
	c := &compiled{when: map[string]cel.Program{}, forEach: map[string]cel.Program{}}
	for _, s := range d.Steps {
		if s.When != "" {
			p, err := compileExpr(s.When, types.BoolKind)
			if err != nil {
				return nil, defErr(s.ID, "when", "%v", err)
			}
			c.when[s.ID] = p
		}
		if s.ForEach != "" {
			p, err := compileExpr(s.ForEach, types.ListKind)
			if err != nil {
				return nil, defErr(s.ID, "for_each", "%v", err)
			}
			c.forEach[s.ID] = p
		}
	}
	return c, nil
}

func compileExpr(expr string, want types.Kind) (cel.Program, error) {
	env, err := exprEnv()
	if err != nil {
		return nil, err
	}
	ast, iss := env.Compile(expr)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("invalid CEL expression: %v", iss.Err())
	}
	if k := ast.OutputType().Kind(); k != want && k != types.DynKind {
		what := "a bool"
		if want == types.ListKind {
			what = "a list"
		}
		return nil, fmt.Errorf("%q is of type %s, not %s", expr, ast.OutputType(), what)
	}
	p, err := env.Program(ast, cel.CostLimit(exprCostLimit))
	if err != nil {
		return nil, fmt.Errorf("invalid CEL expression: %v", err)
	}
	return p, nil
}

// programs returns d's compiled expressions: those Validate made, or new
// ones (a definition built by hand and never validated).
func (d *Definition) programs() (*compiled, error) {
	if d.prog != nil {
		return d.prog, nil
	}
	// Validate a copy: d may be shared, and this must not write to it.
	c := *d
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c.prog, nil
}

// exprVars decodes the run's input and the needed results into the
// variables of an expression.
func exprVars(input json.RawMessage, results map[string]json.RawMessage) (map[string]any, error) {
	var in any
	if len(input) > 0 {
		if err := json.Unmarshal(input, &in); err != nil {
			return nil, fmt.Errorf("the run's input: %v", err)
		}
	}
	res := make(map[string]any, len(results))
	for k, v := range results {
		var x any
		if len(v) > 0 {
			if err := json.Unmarshal(v, &x); err != nil {
				return nil, fmt.Errorf("the result of step %q: %v", k, err)
			}
		}
		res[k] = x
	}
	return map[string]any{"input": in, "results": res}, nil
}

// evalWhen evaluates a when expression.
func evalWhen(p cel.Program, vars map[string]any) (bool, error) {
	out, _, err := p.Eval(vars)
	if err != nil {
		return false, fmt.Errorf("when: %v", err)
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("when: evaluated to a %s, not a bool", out.Type())
	}
	return bool(b), nil
}

// evalForEach evaluates a for_each expression to its elements as JSON.
func evalForEach(p cel.Program, vars map[string]any) ([]json.RawMessage, error) {
	out, _, err := p.Eval(vars)
	if err != nil {
		return nil, fmt.Errorf("for_each: %v", err)
	}
	l, ok := out.(traits.Lister)
	if !ok {
		return nil, fmt.Errorf("for_each: evaluated to a %s, not a list", out.Type())
	}
	n, ok := l.Size().(types.Int)
	if !ok {
		return nil, errors.New("for_each: the list has no size")
	}
	if n > MaxItems {
		return nil, fmt.Errorf("for_each: %d items, more than %d", n, MaxItems)
	}
	items := make([]json.RawMessage, 0, int(n))
	for i := types.Int(0); i < n; i++ {
		b, err := valueJSON(l.Get(i))
		if err != nil {
			return nil, fmt.Errorf("for_each: item %d: %v", i, err)
		}
		items = append(items, b)
	}
	return items, nil
}

var structValueType = reflect.TypeOf(&structpb.Value{})

// valueJSON converts a CEL value to JSON.
func valueJSON(v ref.Val) (json.RawMessage, error) {
	if types.IsError(v) {
		return nil, fmt.Errorf("%v", v)
	}
	nv, err := v.ConvertToNative(structValueType)
	if err != nil {
		return nil, fmt.Errorf("a %s cannot be written as JSON: %v", v.Type(), err)
	}
	sv, ok := nv.(*structpb.Value)
	if !ok {
		return nil, fmt.Errorf("a %s cannot be written as JSON", v.Type())
	}
	return json.Marshal(sv.AsInterface())
}
