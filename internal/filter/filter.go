// Package filter is the where condition of task and dead-letter filters: a
// CEL expression (cel.dev/cel-go) over a task's payload and attributes,
// evaluated in the database where the store can (a well-defined subset is
// translated to SQL: sql.go) and in Go otherwise (Match, Scan).
//
// The environment has two variables: payload (dyn: the task's JSON
// payload, decoded; null when it has none) and attributes (map(string,
// string)). The expression must be of type bool. A task matches when the
// expression evaluates to true; an evaluation error (a missing key, a
// comparison of a string with a number by <) is no match, in Go and in SQL
// alike (SQL's NULL). Numbers follow one model on both paths (number.go).
// The Go path runs under a Budget of cost and time tied to its context
// (budget.go): it must never burn the server for a caller, nor go on
// after the caller left.
package filter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/interpreter"
)

// MaxLen bounds an expression's source, in bytes.
const MaxLen = 4096

// PerTaskCost bounds one task's evaluation (CEL cost units); the
// request's Budget bounds them all.
const PerTaskCost = 1_000_000

// interruptEvery: an evaluation checks its context every this many
// comprehension iterations.
const interruptEvery = 100

var (
	envOnce sync.Once
	celEnv  *cel.Env
	envErr  error
)

func env() (*cel.Env, error) {
	envOnce.Do(func() {
		celEnv, envErr = cel.NewEnv(
			cel.Variable("payload", cel.DynType),
			cel.Variable("attributes", cel.MapType(cel.StringType, cel.StringType)),
			cel.CrossTypeNumericComparisons(true),
		)
	})
	return celEnv, envErr
}

// Expr is a compiled where expression.
type Expr struct {
	src  string
	prog cel.Program
	cond node // the SQL-translatable form; nil when outside the subset
	refs refs
}

// refs is what an expression reads: the keys it names (any depth), and
// whether it could read any key (a computed index).
type refs struct {
	keys  []string
	whole bool
}

// Compile checks and compiles a where expression. Its errors name the
// position in the expression (CEL's "<input>:line:column").
func Compile(src string) (*Expr, error) {
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("is empty")
	}
	if len(src) > MaxLen {
		return nil, fmt.Errorf("is %d bytes, more than %d", len(src), MaxLen)
	}
	e, err := env()
	if err != nil {
		return nil, err
	}
	a, iss := e.Compile(src)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("invalid CEL expression: %v", iss.Err())
	}
	if a.OutputType() != cel.BoolType {
		return nil, fmt.Errorf("invalid CEL expression: %q is of type %s, not bool", src, a.OutputType())
	}
	p, err := e.Program(a, cel.CostLimit(PerTaskCost), cel.EvalOptions(cel.OptTrackCost),
		cel.InterruptCheckFrequency(interruptEvery))
	if err != nil {
		return nil, fmt.Errorf("invalid CEL expression: %v", err)
	}
	x := &Expr{src: src, prog: p}
	root := a.NativeRep().Expr()
	x.cond = translate(root)
	collectRefs(root, &x.refs)
	return x, nil
}

// String is the expression's source.
func (x *Expr) String() string { return x.src }

// InSQL reports whether the expression is within the subset the stores
// evaluate in SQL.
func (x *Expr) InSQL() bool { return x.cond != nil }

// Match evaluates the expression on a payload and attributes, under a
// default budget of its own. An evaluation error, or a spent budget, is no
// match.
func (x *Expr) Match(payload json.RawMessage, attrs map[string]string) bool {
	ok, err := x.Eval(context.Background(), payload, attrs)
	return ok && err == nil
}

// Eval evaluates the expression on a payload and attributes, drawing on
// ctx's budget (WithBudget; a default one of its own when ctx has none)
// and stopping when ctx ends. An evaluation error (a missing key…) is no
// match; a spent budget is a *BudgetError, an ended ctx its error.
func (x *Expr) Eval(ctx context.Context, payload json.RawMessage, attrs map[string]string) (bool, error) {
	m := meterOf(ctx)
	bctx, cancel := m.bound(ctx)
	defer cancel()
	return x.eval(ctx, bctx, m, payload, attrs)
}

// eval is one evaluation: parent is the caller's context, bctx the same
// bounded by m's deadline.
func (x *Expr) eval(parent, bctx context.Context, m *meter, payload json.RawMessage, attrs map[string]string) (bool, error) {
	if bctx.Err() != nil {
		return false, m.spentErr(parent)
	}
	var p any
	if len(payload) > 0 {
		var err error
		if p, err = decodePayload(payload); err != nil {
			return false, m.charge(0)
		}
	}
	if attrs == nil {
		attrs = map[string]string{}
	}
	out, det, err := x.prog.ContextEval(bctx, map[string]any{"payload": p, "attributes": attrs})
	var cancelled interpreter.EvalCancelledError
	switch {
	case bctx.Err() != nil:
		return false, m.spentErr(parent)
	case errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded:
		m.mu.Lock()
		defer m.mu.Unlock()
		return false, &BudgetError{Budget: "cost", Limit: m.b, Evaluated: m.n, OneTask: true}
	}
	var cost uint64
	if det != nil && det.ActualCost() != nil {
		cost = *det.ActualCost()
	}
	if cerr := m.charge(cost); cerr != nil {
		return false, cerr
	}
	if err != nil {
		return false, nil
	}
	b, ok := out.(types.Bool)
	return ok && bool(b), nil
}

// MaskedRef returns a key the expression names that masked reports true
// for, or "*" when it indexes by a computed key (then it could read any);
// ok is false when it reads no masked key. A viewer whose payloads are masked must not
// filter on a masked field's value.
func (x *Expr) MaskedRef(masked func(key string) bool) (string, bool) {
	for _, k := range x.refs.keys {
		if masked(k) {
			return k, true
		}
	}
	if x.refs.whole {
		return "*", true
	}
	return "", false
}

// ErrNotInSQL is a store's answer to a where outside the SQL subset where
// only SQL will do (its grouped counts); List evaluates it in Go, and the
// client streams counts and redrives of such a where through Go (Each).
var ErrNotInSQL = errors.New("the where expression is outside the subset evaluated in the database")
