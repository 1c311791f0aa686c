package filter

import (
	"encoding/json"
	"math"
	"regexp"
	"strconv"
	"strings"

	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
)

// The subset evaluated in SQL: comparisons (==, !=, <, <=, >, >=) of a
// payload or attribute path (payload.a.b, payload["a-b"], attributes.k)
// with a literal (int, uint, double, string, bool, null; ordering only for
// numbers and strings), `path in [literals]`, has(path), and &&, ||, !
// of those. Everything else is evaluated in Go (Match).
//
// CEL's error semantics map onto SQL's NULL: a missing key, or an ordering
// of mismatched types, is an error in CEL and NULL in SQL; && and || absorb
// both the same way (false && error is false, true || error is true), ! keeps
// both, and a task matches only when the whole is true. An equality of
// mismatched types is false in both. Numbers follow one model on every
// path (number.go).

type node interface{ isNode() }

type (
	andNode struct{ l, r node }
	orNode  struct{ l, r node }
	notNode struct{ x node }
	cmpNode struct {
		p   path
		op  string // ==, !=, <, <=, >, >=
		lit lit
	}
	inNode struct {
		p    path
		lits []lit
	}
	hasNode struct{ p path }
)

func (andNode) isNode() {}
func (orNode) isNode()  {}
func (notNode) isNode() {}
func (cmpNode) isNode() {}
func (inNode) isNode()  {}
func (hasNode) isNode() {}

type path struct {
	root string // payload or attributes
	keys []string
}

type litKind int

const (
	litNum litKind = iota
	litStr
	litBool
	litNull
)

type lit struct {
	kind litKind
	v    any // float64 (every number: number.go), string, bool
}

var cmpOps = map[string]string{
	operators.Equals: "==", operators.NotEquals: "!=", operators.Less: "<",
	operators.LessEquals: "<=", operators.Greater: ">", operators.GreaterEquals: ">=",
}

var flipOp = map[string]string{"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}

// translate is e's SQL form, or nil when e is outside the subset.
func translate(e ast.Expr) node {
	switch e.Kind() {
	case ast.SelectKind:
		s := e.AsSelect()
		if !s.IsTestOnly() {
			return nil
		}
		p, ok := pathOf(s.Operand())
		if !ok || !keyOK(s.FieldName()) {
			return nil
		}
		p.keys = append(append([]string{}, p.keys...), s.FieldName())
		return hasNode{p}
	case ast.CallKind:
	default:
		return nil
	}
	c := e.AsCall()
	args := c.Args()
	switch fn := c.FunctionName(); {
	case fn == operators.LogicalAnd || fn == operators.LogicalOr:
		if len(args) < 2 {
			return nil
		}
		var out node
		for _, a := range args {
			n := translate(a)
			if n == nil {
				return nil
			}
			switch {
			case out == nil:
				out = n
			case fn == operators.LogicalAnd:
				out = andNode{out, n}
			default:
				out = orNode{out, n}
			}
		}
		return out
	case fn == operators.LogicalNot:
		if len(args) != 1 {
			return nil
		}
		if n := translate(args[0]); n != nil {
			return notNode{n}
		}
		return nil
	case cmpOps[fn] != "":
		if len(args) != 2 {
			return nil
		}
		op := cmpOps[fn]
		p, ok := pathOf(args[0])
		l, lok := litOf(args[1])
		if !ok || !lok {
			p, ok = pathOf(args[1])
			l, lok = litOf(args[0])
			op = flipOp[op]
		}
		if !ok || !lok || len(p.keys) == 0 {
			return nil
		}
		if op != "==" && op != "!=" && l.kind != litNum && l.kind != litStr {
			return nil
		}
		return cmpNode{p, op, l}
	case fn == operators.In:
		if len(args) != 2 || args[1].Kind() != ast.ListKind {
			return nil
		}
		p, ok := pathOf(args[0])
		if !ok || len(p.keys) == 0 {
			return nil
		}
		el := args[1].AsList()
		if len(el.OptionalIndices()) > 0 || len(el.Elements()) == 0 {
			return nil
		}
		var ls []lit
		for _, x := range el.Elements() {
			l, ok := litOf(x)
			if !ok {
				return nil
			}
			ls = append(ls, l)
		}
		return inNode{p, ls}
	}
	return nil
}

// intLike keys would index arrays in Postgres's #> path: kept out of SQL.
var intLike = regexp.MustCompile(`^\s*[+-]?[0-9]+\s*$`)

// keyOK: a key the SQL paths of both stores name unambiguously.
func keyOK(k string) bool {
	if k == "" || intLike.MatchString(k) || strings.ContainsAny(k, "\"\\") {
		return false
	}
	for _, r := range k {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// pathOf reads payload.a.b, payload["a"], attributes.k.
func pathOf(e ast.Expr) (path, bool) {
	switch e.Kind() {
	case ast.IdentKind:
		if n := e.AsIdent(); n == "payload" || n == "attributes" {
			return path{root: n}, true
		}
	case ast.SelectKind:
		s := e.AsSelect()
		if s.IsTestOnly() || !keyOK(s.FieldName()) {
			return path{}, false
		}
		p, ok := pathOf(s.Operand())
		if !ok {
			return path{}, false
		}
		p.keys = append(append([]string{}, p.keys...), s.FieldName())
		return p, true
	case ast.CallKind:
		c := e.AsCall()
		if c.FunctionName() != operators.Index || len(c.Args()) != 2 || c.Args()[1].Kind() != ast.LiteralKind {
			return path{}, false
		}
		k, ok := c.Args()[1].AsLiteral().(types.String)
		if !ok || !keyOK(string(k)) {
			return path{}, false
		}
		p, ok := pathOf(c.Args()[0])
		if !ok {
			return path{}, false
		}
		p.keys = append(append([]string{}, p.keys...), string(k))
		return p, true
	}
	return path{}, false
}

func litOf(e ast.Expr) (lit, bool) {
	if e.Kind() != ast.LiteralKind {
		return lit{}, false
	}
	switch v := e.AsLiteral().(type) {
	case types.Int:
		return lit{litNum, float64(v)}, true // as CEL compares it with a double
	case types.Uint:
		return lit{litNum, float64(v)}, true
	case types.Double:
		f := float64(v)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return lit{}, false
		}
		return lit{litNum, f}, true
	case types.String:
		if strings.ContainsRune(string(v), 0) {
			return lit{}, false // SQL text holds no U+0000: Go
		}
		return lit{litStr, string(v)}, true
	case types.Bool:
		return lit{litBool, bool(v)}, true
	case types.Null:
		return lit{litNull, nil}, true
	}
	return lit{}, false
}

// collectRefs records the keys e reads: every selected field (payload.a,
// x.a on a comprehension's variable alike) and string index, and the keys
// of map literals (comparing with one reads them). An index computed at
// run time (payload[k]) could read any key: whole.
func collectRefs(e ast.Expr, r *refs) {
	switch e.Kind() {
	case ast.SelectKind:
		s := e.AsSelect()
		if op := s.Operand(); op.Kind() != ast.IdentKind || op.AsIdent() != "attributes" {
			r.keys = append(r.keys, s.FieldName())
		}
		collectRefs(s.Operand(), r)
	case ast.CallKind:
		c := e.AsCall()
		if c.FunctionName() == operators.Index && len(c.Args()) == 2 {
			idx := c.Args()[1]
			if idx.Kind() != ast.LiteralKind {
				r.whole = true
			} else if k, ok := idx.AsLiteral().(types.String); ok {
				if a := c.Args()[0]; a.Kind() != ast.IdentKind || a.AsIdent() != "attributes" {
					r.keys = append(r.keys, string(k))
				}
			}
		}
		if c.IsMemberFunction() {
			collectRefs(c.Target(), r)
		}
		for _, a := range c.Args() {
			collectRefs(a, r)
		}
	case ast.ListKind:
		for _, x := range e.AsList().Elements() {
			collectRefs(x, r)
		}
	case ast.MapKind:
		for _, en := range e.AsMap().Entries() {
			me := en.AsMapEntry()
			if me.Key().Kind() != ast.LiteralKind {
				r.whole = true
			} else if k, ok := me.Key().AsLiteral().(types.String); ok {
				r.keys = append(r.keys, string(k))
			}
			collectRefs(me.Key(), r)
			collectRefs(me.Value(), r)
		}
	case ast.StructKind:
		for _, f := range e.AsStruct().Fields() {
			collectRefs(f.AsStructField().Value(), r)
		}
	case ast.ComprehensionKind:
		cp := e.AsComprehension()
		for _, x := range []ast.Expr{cp.IterRange(), cp.AccuInit(), cp.LoopCondition(), cp.LoopStep(), cp.Result()} {
			collectRefs(x, r)
		}
	}
}

// Dialect is a store's SQL flavour.
type Dialect int

const (
	SQLite Dialect = iota
	Postgres
)

// Docs are the SQL expressions of the JSON documents a condition reads.
type Docs struct {
	Payload string // the payload as JSON text (SQLite) or jsonb (Postgres), NULL when none
	Attrs   string // the attributes, likewise
	// PayloadJSON (Postgres): the payload is of type json, not jsonb (read
	// with json_typeof and the json operators, not converted per row).
	PayloadJSON bool
	// Unreadable (optional): true for a row whose payload the SQL cannot
	// read (Postgres: json holding \u0000, which its operators refuse); a
	// condition that reads the payload is NULL there (no match).
	Unreadable string
	// PayloadIndex (Postgres, optional): the jsonb expression of the
	// payload that a GIN index (jsonb_path_ops) holds. It must be the
	// payload itself wherever every number in it has at most 15
	// significant digits (so is the one decimal of its double that
	// FormatFloat(f, 'g', 15) writes) and within the range of normal
	// doubles, and PayloadIndexOther wherever not (a spilled payload, one
	// that does not convert to jsonb, one with other numbers). With it,
	// SQL adds a containment (@>) the index answers to a condition that
	// has one: == of a payload path with a literal, a payload path in
	// [literals], && with one of those, || of two of those. The condition
	// itself still decides, so no answer changes. Set it only where the
	// index holds every row the query reads (the planner uses the index
	// then; elsewhere each row would pay for the expression).
	PayloadIndex string
	// PayloadIndexOther is the JSON document PayloadIndex is for the
	// payloads it does not hold: one with a number outside the model
	// above, which no payload the index holds contains.
	PayloadIndexOther string
	// PayloadIndexHolds (optional, with PayloadIndex) is the condition
	// beyond the state by which the index holds a row (its partial
	// predicate's other term), true of every row where the containment
	// SQL adds can be: SQL puts it beside the containment, so that the
	// planner can prove the index's predicate. A containment SQL adds is
	// of a document holding a literal at a path, of a literal itself, or
	// of PayloadIndexOther; the empty object contains none of them, so a
	// condition that leaves out payloads that are {} qualifies.
	PayloadIndexHolds string
}

// SQL is the expression's condition in d, reading docs, with arg adding a
// parameter and returning its placeholder; ok is false outside the subset.
func (x *Expr) SQL(d Dialect, docs Docs, arg func(any) string) (string, bool) {
	if x.cond == nil {
		return "", false
	}
	g := gen{d: d, docs: docs, arg: arg}
	cond := g.node(x.cond)
	if docs.Unreadable != "" && readsPayload(x.cond) {
		cond = "(CASE WHEN " + docs.Unreadable + " THEN NULL ELSE " + cond + " END)"
	}
	if d == Postgres && docs.PayloadIndex != "" {
		if indexed(x.cond) {
			// True wherever cond is: a payload the index holds contains
			// the literal where cond is true; the others hold the marker.
			holds := ""
			if docs.PayloadIndexHolds != "" {
				holds = docs.PayloadIndexHolds + " AND "
			}
			cond = "((" + g.contains(x.cond) + " OR " + docs.PayloadIndex + " @> " + g.arg(docs.PayloadIndexOther) + "::jsonb) AND " + holds + cond + ")"
		}
	}
	return cond, true
}

// PayloadIndexed reports whether SQL with Docs.PayloadIndex adds a
// containment the payload index answers (the conditions listed there).
func (x *Expr) PayloadIndexed() bool { return x.cond != nil && indexed(x.cond) }

// indexed says whether n has a containment (contains).
func indexed(n node) bool {
	switch n := n.(type) {
	case andNode:
		return indexed(n.l) || indexed(n.r)
	case orNode:
		return indexed(n.l) && indexed(n.r)
	case cmpNode:
		return n.op == "==" && n.p.root == "payload"
	case inNode:
		return n.p.root == "payload"
	}
	return false
}

// contains is a containment on the payload index that is true for each
// payload the index holds (Docs.PayloadIndex) where n is true; n must be
// indexed.
func (g gen) contains(n node) string {
	switch n := n.(type) {
	case andNode:
		switch {
		case indexed(n.l) && indexed(n.r):
			return "(" + g.contains(n.l) + " AND " + g.contains(n.r) + ")"
		case indexed(n.l):
			return g.contains(n.l)
		default:
			return g.contains(n.r)
		}
	case orNode:
		return "(" + g.contains(n.l) + " OR " + g.contains(n.r) + ")"
	case cmpNode:
		return g.docs.PayloadIndex + " @> " + g.arg(containDoc(n.p, n.lit)) + "::jsonb"
	case inNode:
		parts := make([]string, len(n.lits))
		for i, l := range n.lits {
			parts[i] = g.docs.PayloadIndex + " @> " + g.arg(containDoc(n.p, l)) + "::jsonb"
		}
		return "(" + strings.Join(parts, " OR ") + ")"
	}
	panic("filter: contains of a condition without one")
}

// containDoc is the JSON document holding l at p: a number as the decimal
// of its double to 15 significant digits, which is the payload's own
// number wherever the index holds the payload and the number rounds to l.
func containDoc(p path, l lit) string {
	var v any
	switch l.kind {
	case litNum:
		v = json.Number(strconv.FormatFloat(l.v.(float64), 'g', 15, 64))
	default:
		v = l.v // string, bool, nil
	}
	for i := len(p.keys) - 1; i >= 0; i-- {
		v = map[string]any{p.keys[i]: v}
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic("filter: " + err.Error()) // strings, bools, finite numbers and maps of them always marshal
	}
	return string(b)
}

func readsPayload(n node) bool {
	switch n := n.(type) {
	case andNode:
		return readsPayload(n.l) || readsPayload(n.r)
	case orNode:
		return readsPayload(n.l) || readsPayload(n.r)
	case notNode:
		return readsPayload(n.x)
	case cmpNode:
		return n.p.root == "payload"
	case inNode:
		return n.p.root == "payload"
	case hasNode:
		return n.p.root == "payload"
	}
	return false
}

type gen struct {
	d    Dialect
	docs Docs
	arg  func(any) string
}

func (g gen) node(n node) string {
	switch n := n.(type) {
	case andNode:
		return "(" + g.node(n.l) + " AND " + g.node(n.r) + ")"
	case orNode:
		return "(" + g.node(n.l) + " OR " + g.node(n.r) + ")"
	case notNode:
		return "(NOT " + g.node(n.x) + ")"
	case cmpNode:
		if n.op == "!=" {
			return "(NOT " + g.eq(n.p, n.lit) + ")"
		}
		if n.op == "==" {
			return g.eq(n.p, n.lit)
		}
		return g.ord(n.p, n.op, n.lit)
	case inNode:
		parts := make([]string, len(n.lits))
		for i, l := range n.lits {
			parts[i] = g.eq(n.p, l)
		}
		return "(" + strings.Join(parts, " OR ") + ")"
	case hasNode:
		return g.has(n.p)
	}
	panic("filter: unknown node")
}

func (g gen) doc(p path) string {
	if p.root == "attributes" {
		return g.docs.Attrs
	}
	return g.docs.Payload
}

// typ is the JSON type at p (NULL when missing); val its scalar value
// (SQLite: json_extract; Postgres: the text of the value).
func (g gen) typ(p path) string {
	if g.d == SQLite {
		return "json_type(" + g.doc(p) + ", " + sqlitePath(p.keys) + ")"
	}
	fn := "jsonb_typeof("
	if p.root == "payload" && g.docs.PayloadJSON {
		fn = "json_typeof("
	}
	if len(p.keys) == 0 {
		return fn + g.doc(p) + ")"
	}
	return fn + g.doc(p) + " #> " + g.arg(p.keys) + "::text[])"
}

func (g gen) val(p path) string {
	if g.d == SQLite {
		return "json_extract(" + g.doc(p) + ", " + sqlitePath(p.keys) + ")"
	}
	return "(" + g.doc(p) + " #>> " + g.arg(p.keys) + "::text[])"
}

// sqlitePath is a JSON path as an SQL string literal, written inline (a
// placeholder would be bound once per use): keyOK keeps out the quotes and
// backslashes a path cannot escape; a single quote is doubled.
func sqlitePath(keys []string) string {
	var b strings.Builder
	b.WriteString("'$")
	for _, k := range keys {
		b.WriteString(`."`)
		b.WriteString(strings.ReplaceAll(k, "'", "''"))
		b.WriteString(`"`)
	}
	b.WriteString("'")
	return b.String()
}

func (g gen) lit(l lit) string {
	if g.d == Postgres && l.kind == litStr {
		return g.arg(l.v) + "::text"
	}
	return g.arg(l.v)
}

// num is p's number as the numeric model reads it (number.go): SQLite's
// value as a double; Postgres's exact numeric, compared with the bounds of
// the literal's double (pgNum).
func (g gen) num(p path) string {
	if g.d == SQLite {
		return "CAST(" + g.val(p) + " AS REAL)"
	}
	return g.val(p) + "::numeric"
}

// pgNum is Postgres's "number at p op the double f": the exact value
// against the interval of decimals that round to f.
func (g gen) pgNum(p path, op string, f float64) string {
	lo, hi, closed := numBounds(f)
	v := g.num(p)
	switch op {
	case "==":
		r := "(" + lo + "," + hi + ")"
		if closed {
			r = "[" + lo + "," + hi + "]"
		}
		return v + " <@ " + g.arg(r) + "::numrange"
	case "<": // below the interval
		if closed {
			return v + " < " + g.arg(lo) + "::numeric"
		}
		return v + " <= " + g.arg(lo) + "::numeric"
	case "<=":
		if closed {
			return v + " <= " + g.arg(hi) + "::numeric"
		}
		return v + " < " + g.arg(hi) + "::numeric"
	case ">": // above the interval
		if closed {
			return v + " > " + g.arg(hi) + "::numeric"
		}
		return v + " >= " + g.arg(hi) + "::numeric"
	default: // >=
		if closed {
			return v + " >= " + g.arg(lo) + "::numeric"
		}
		return v + " > " + g.arg(lo) + "::numeric"
	}
}

// eq is p == l: NULL when p is missing, false when its type differs.
func (g gen) eq(p path, l lit) string {
	t := g.typ(p)
	if g.d == SQLite {
		switch l.kind {
		case litNum:
			return "(CASE WHEN " + t + " IS NULL THEN NULL WHEN " + t + " IN ('integer', 'real') THEN " + g.num(p) + " = " + g.lit(l) + " ELSE 0 END)"
		case litStr:
			return "(CASE WHEN " + t + " IS NULL THEN NULL WHEN " + t + " = 'text' THEN " + g.val(p) + " = " + g.lit(l) + " ELSE 0 END)"
		case litBool:
			want := "'false'"
			if l.v.(bool) {
				want = "'true'"
			}
			return "(CASE WHEN " + t + " IS NULL THEN NULL ELSE " + t + " = " + want + " END)"
		default:
			return "(CASE WHEN " + t + " IS NULL THEN NULL ELSE " + t + " = 'null' END)"
		}
	}
	switch l.kind {
	case litNum:
		return "(CASE WHEN " + t + " IS NULL THEN NULL WHEN " + t + " = 'number' THEN " + g.pgNum(p, "==", l.v.(float64)) + " ELSE false END)"
	case litStr:
		return "(CASE WHEN " + t + " IS NULL THEN NULL WHEN " + t + " = 'string' THEN " + g.val(p) + " = " + g.lit(l) + " ELSE false END)"
	case litBool:
		want := "'false'"
		if l.v.(bool) {
			want = "'true'"
		}
		return "(CASE WHEN " + t + " IS NULL THEN NULL ELSE " + t + " = 'boolean' AND " + g.val(p) + " = " + want + " END)"
	default:
		return "(CASE WHEN " + t + " IS NULL THEN NULL ELSE " + t + " = 'null' END)"
	}
}

// ord is p op l for numbers and strings: NULL unless p's type is l's.
func (g gen) ord(p path, op string, l lit) string {
	t := g.typ(p)
	if g.d == SQLite {
		if l.kind == litStr {
			return "(CASE WHEN " + t + " = 'text' THEN " + g.val(p) + " " + op + " " + g.lit(l) + " ELSE NULL END)"
		}
		return "(CASE WHEN " + t + " IN ('integer', 'real') THEN " + g.num(p) + " " + op + " " + g.lit(l) + " ELSE NULL END)"
	}
	if l.kind == litStr {
		return "(CASE WHEN " + t + " = 'string' THEN " + g.val(p) + ` COLLATE "C" ` + op + " " + g.lit(l) + " ELSE NULL END)"
	}
	return "(CASE WHEN " + t + " = 'number' THEN " + g.pgNum(p, op, l.v.(float64)) + " ELSE NULL END)"
}

// has is has(p): attributes is always a map (a missing key is false). In
// the payload, CEL's has() on a present value that is neither an object nor
// a list is false, and on a list or a missing value an error (NULL); the
// payload itself is always present (null when the task has none).
func (g gen) has(p path) string {
	t := g.typ(p)
	if p.root == "attributes" {
		return "(" + t + " IS NOT NULL)"
	}
	parent := path{root: p.root, keys: p.keys[:len(p.keys)-1]}
	pt := g.typ(parent)
	f := "0"
	if g.d == Postgres {
		f = "false"
	}
	if len(parent.keys) == 0 {
		return "(CASE WHEN " + pt + " = 'object' THEN " + t + " IS NOT NULL WHEN " + pt + " = 'array' THEN NULL ELSE " + f + " END)"
	}
	return "(CASE WHEN " + pt + " IS NULL OR " + pt + " = 'array' THEN NULL WHEN " + pt + " = 'object' THEN " + t + " IS NOT NULL ELSE " + f + " END)"
}
