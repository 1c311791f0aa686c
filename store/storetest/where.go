package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/filter"
	"github.com/backstophq/backstop/store"
)

// testWhere: a where condition on the payload and attributes (CEL,
// internal/filter) selects tasks and dead letters in List, DeadLetters,
// ExportDLQ, DeadLetterGroupCounts and Redrive (the last two in Go:
// where_go.go); in the SQL subset on the
// database (spilled payloads too), outside it in Go with the same result
// and a cursor that pages correctly; a bad expression is ErrInvalid naming
// where, nothing done.
func (s *suite) testWhere(t *testing.T) {
	t.Parallel()
	b := s.setup(t, &backstop.Config{InlinePayloadLimit: 256})
	want := map[string][]string{}
	for i := range 30 {
		tenant := []string{"acme", "globex", "initech"}[i%3]
		tags := `["std"]`
		if i%4 == 0 {
			tags = `["vip","std"]`
		}
		pad := ""
		if i%5 == 0 {
			pad = strings.Repeat("p", 400) // spilled
		}
		p := json.RawMessage(fmt.Sprintf(`{"customer":{"id":%d,"name":"c%02d"},"tags":%s,"pad":%q}`, 40+i%5, i, tags, pad))
		id := fmt.Sprintf("w-%02d", i)
		ep := backstop.EnqueueParams{ID: id, Queue: "wq", Kind: "k", Payload: p, MaxAttempts: 1,
			Attributes: map[string]string{"tenant": tenant}}
		if i%2 == 0 {
			ep.Queue = "wqdead" // kill takes the queue's first task
			b.dead(ep)
		} else {
			b.enqueue(ep)
		}
		if 40+i%5 == 42 && tenant == "acme" {
			want["sql"] = append(want["sql"], id)
			if i%2 == 0 {
				want["sqldead"] = append(want["sqldead"], id)
			}
		}
		if i%4 == 0 {
			want["go"] = append(want["go"], id)
		}
		if i%5 == 0 && i%2 == 0 {
			want["spilleddead"] = append(want["spilleddead"], id)
		}
	}
	ids := func(ts []*backstop.Task) []string {
		out := []string{}
		for _, t := range ts {
			out = append(out, t.ID)
		}
		return out
	}
	list := func(f backstop.ListParams) []*backstop.Task {
		t.Helper()
		ts, err := b.c.List(b.ctx, f)
		if err != nil {
			t.Fatalf("list %q: %v", f.Where, err)
		}
		return ts
	}
	const sqlWhere = `payload.customer.id == 42 && attributes.tenant == "acme"`
	const goWhere = `payload.tags.exists(t, t == "vip")`
	if x, _ := filter.Compile(sqlWhere); !x.InSQL() {
		t.Fatal("the SQL example is not in the SQL subset")
	}
	if x, _ := filter.Compile(goWhere); x.InSQL() {
		t.Fatal("the Go example is in the SQL subset")
	}
	eq(t, "tasks by payload (SQL)", ids(list(backstop.ListParams{Where: sqlWhere})), want["sql"])
	eq(t, "tasks by payload (Go)", ids(list(backstop.ListParams{Where: goWhere})), want["go"])
	eq(t, "spilled payloads (Go)", ids(list(backstop.ListParams{States: []backstop.State{backstop.StateDead},
		Where: `payload.pad.startsWith("p") == true || has(payload.customer.zzz)`})), want["spilleddead"])
	eq(t, "spilled payloads by a path (SQL)", ids(list(backstop.ListParams{States: []backstop.State{backstop.StateDead},
		Where: `payload.pad >= "p"`})), want["spilleddead"])
	eq(t, "dead letters by payload", ids(mustDL(t, b, backstop.ListParams{Where: sqlWhere})), want["sqldead"])

	// A payload holding \u0000 (Postgres's json operators refuse it) is
	// refused at enqueue; one stored before that rule (written here through
	// the store) is no error: on Postgres the SQL path does not match it
	// (documented), SQLite and the Go path do.
	nul := json.RawMessage(`{"s":"a\u0000b","n":1}`)
	_, err := b.c.Enqueue(b.ctx, backstop.EnqueueParams{Queue: "wnul", Kind: "k", Payload: nul})
	wantInvalid(t, "a payload holding \\u0000", err, "payload")
	old := newTask(b, "w-nul", "wnul")
	old.Payload, old.PayloadSize, old.Attributes = nul, len(nul), map[string]string{"tenant": "acme"}
	if _, err := b.store.Enqueue(b.ctx, []*bt.Task{old}, store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	wantNUL := []string{"w-nul"}
	if strings.Contains(fmt.Sprintf("%T", b.store), "pgstore") {
		wantNUL = []string{}
	}
	eq(t, "a NUL in the payload (SQL)", ids(list(backstop.ListParams{Queue: "wnul", Where: `payload.s > "a" || payload.n == 1`})), wantNUL)
	eq(t, "a NUL in the payload (Go)", ids(list(backstop.ListParams{Queue: "wnul", Where: `payload.s.startsWith("a")`})), []string{"w-nul"})
	eq(t, "a NUL in the payload, attributes only", ids(list(backstop.ListParams{Queue: "wnul", Where: `attributes.tenant == "acme"`})), []string{"w-nul"})

	// Paging with a Go-side filter: pages of 2 by the last id's cursor give
	// every match once, in order; summaries carry no payload.
	var paged []string
	after := ""
	for {
		page := list(backstop.ListParams{Where: goWhere, Limit: 2, AfterID: after, WithoutPayload: true})
		for _, tk := range page {
			if tk.Payload != nil {
				t.Fatalf("summary %s carries its payload", tk.ID)
			}
		}
		paged = append(paged, ids(page)...)
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].ID
	}
	eq(t, "Go-side filter, paged", paged, want["go"])

	// Export by payload: the SQL subset and Go.
	for _, w := range []string{sqlWhere, `payload.customer.name.endsWith("0") && attributes.tenant == "acme"`} {
		var got []string
		if _, err := b.c.ExportDLQ(b.ctx, backstop.ListParams{Where: w}, func(d backstop.DeadLetterExport) error {
			got = append(got, d.ID)
			return nil
		}); err != nil {
			t.Fatalf("export %q: %v", w, err)
		}
		var exp []string
		for _, tk := range mustDL(t, b, backstop.ListParams{Limit: 1000}) {
			x, _ := filter.Compile(w)
			if x.Match(tk.Payload, tk.Attributes) {
				exp = append(exp, tk.ID)
			}
		}
		if len(exp) == 0 {
			t.Fatalf("export %q: the fixture selects nothing", w)
		}
		eq(t, "export "+w, got, exp)
	}

	// Counts by group: the SQL subset (a Go-side where: where_go.go).
	g, err := b.c.DeadLetterGroupCounts(b.ctx, backstop.ListParams{Where: sqlWhere}, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range g.ByReason {
		n += r.Count
	}
	eq(t, "group counts by payload", n, len(want["sqldead"]))

	// Bad expressions: ErrInvalid naming where, with CEL's position.
	for _, w := range []string{`payload.customer.id ==`, `payload.customer.id`, `1 + 2`, `attributes.tenant == 42`, `nope == 1`} {
		_, err := b.c.List(b.ctx, backstop.ListParams{Where: w})
		var ve *backstop.ValidationError
		if !errors.Is(err, backstop.ErrInvalid) || !errors.As(err, &ve) || ve.Field != "where" {
			t.Fatalf("where %q: %v, want ErrInvalid naming where", w, err)
		}
	}
	if _, err := b.c.List(b.ctx, backstop.ListParams{Where: `payload.x ==`}); err == nil || !strings.Contains(err.Error(), "1:13") {
		t.Fatalf("a syntax error names no position: %v", err)
	}
	// A redrive takes a Go-side where too (where_go.go): its dry run counts
	// the matches and changes nothing; a bad where is refused, nothing replayed.
	pre, err := b.c.Redrive(b.ctx, backstop.RedriveParams{Filter: backstop.ListParams{Where: goWhere}, DryRun: true}, nil)
	if err != nil {
		t.Fatalf("dry run by a Go-side where: %v", err)
	}
	eq(t, "dry run by a Go-side where", pre.Preview.Matched, len(mustDL(t, b, backstop.ListParams{Where: goWhere})))
	if _, err := b.c.Redrive(b.ctx, backstop.RedriveParams{Filter: backstop.ListParams{Where: `payload.x ==`}}, nil); !errors.Is(err, backstop.ErrInvalid) {
		t.Fatalf("redrive by a bad where: %v, want ErrInvalid", err)
	}
	eq(t, "dead letters after a dry run and a refused redrive", len(mustDL(t, b, backstop.ListParams{DLQStatuses: []backstop.DLQStatus{backstop.DLQOpen}})), 15)

	// Redrive by payload replays exactly the matching dead letters.
	res, err := b.c.Redrive(b.ctx, backstop.RedriveParams{Filter: backstop.ListParams{Where: sqlWhere}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "redriven", res.Replayed, len(want["sqldead"]))
	for _, id := range want["sqldead"] {
		if st := b.get(id).State; st == backstop.StateDead {
			t.Fatalf("%s matched and is still dead", id)
		}
	}
	eq(t, "dead letters left open", len(mustDL(t, b, backstop.ListParams{DLQStatuses: []backstop.DLQStatus{backstop.DLQOpen}})), 15-len(want["sqldead"]))
	// With a patch (one by one through List).
	res, err = b.c.Redrive(b.ctx, backstop.RedriveParams{Filter: backstop.ListParams{Where: `payload.customer.id in [40, 41]`},
		MergePatch: json.RawMessage(`{"patched":true}`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Replayed == 0 {
		t.Fatal("a patched redrive by payload replayed nothing")
	}
	for _, tk := range list(backstop.ListParams{Where: `payload.patched == true`, Limit: 1000}) {
		var p struct{ Customer struct{ ID int } }
		_ = json.Unmarshal(tk.Payload, &p)
		if p.Customer.ID != 40 && p.Customer.ID != 41 {
			t.Fatalf("%s patched but its customer is %d", tk.ID, p.Customer.ID)
		}
	}
}

func mustDL(t *testing.T, b *bundle, f backstop.ListParams) []*backstop.Task {
	t.Helper()
	ts, err := b.c.DeadLetters(b.ctx, f)
	if err != nil {
		t.Fatalf("dead letters %q: %v", f.Where, err)
	}
	return ts
}

// testWhereProperty: for random payloads and random expressions of the
// SQL subset, the store's SQL evaluation selects exactly the tasks the Go
// evaluation (filter.Match) does.
func (s *suite) testWhereProperty(t *testing.T) {
	t.Parallel()
	b := s.setup(t, &backstop.Config{InlinePayloadLimit: 200})
	r := rand.New(rand.NewPCG(17, 42))
	type row struct {
		id      string
		payload json.RawMessage
		attrs   map[string]string
	}
	var rows []row
	for i := range 150 {
		p := json.RawMessage(RandomPayload(r))
		var attrs map[string]string
		if r.IntN(3) > 0 {
			attrs = map[string]string{}
			for _, k := range []string{"a", "b"} {
				if r.IntN(2) == 0 {
					attrs[k] = randStr(r)
				}
			}
		}
		id := fmt.Sprintf("p-%03d", i)
		b.enqueue(backstop.EnqueueParams{ID: id, Queue: "prop", Kind: "k", Payload: p, Attributes: attrs})
		rows = append(rows, row{id, p, attrs})
	}
	for range 400 {
		w := RandomWhere(r)
		x, err := filter.Compile(w)
		if err != nil {
			t.Fatalf("generated %q does not compile: %v", w, err)
		}
		if !x.InSQL() {
			t.Fatalf("generated %q is outside the SQL subset", w)
		}
		var want []string
		for _, rw := range rows {
			if x.Match(rw.payload, rw.attrs) {
				want = append(want, rw.id)
			}
		}
		got, err := b.store.List(b.ctx, store.ListFilter{Queue: "prop", Where: w, Limit: 1000, WithoutPayload: true})
		if err != nil {
			t.Fatalf("where %q: %v", w, err)
		}
		var gotIDs []string
		for _, tk := range got {
			gotIDs = append(gotIDs, tk.ID)
		}
		if !slices.Equal(gotIDs, want) {
			t.Fatalf("where %q: SQL selects %v, Go %v", w, gotIDs, want)
		}
	}
}

var (
	propKeys = []string{"a", "b", "c"}
	propStrs = []string{"", "x", "y", "X", "é", "10", "true", "null"}
)

func randStr(r *rand.Rand) string { return propStrs[r.IntN(len(propStrs))] }

// RandomPayload is a small JSON document of the keys and values the
// property tests compare on (objects nest up to two levels).
func RandomPayload(r *rand.Rand) string { return randValue(r, 2, true) }

func randValue(r *rand.Rand, depth int, top bool) string {
	n := 7
	if depth == 0 {
		n = 5
	}
	if top && r.IntN(10) > 0 {
		return randObject(r, depth)
	}
	switch r.IntN(n) {
	case 0:
		return strconv.Itoa(r.IntN(7) - 3)
	case 1:
		return []string{"1.5", "-0.5", "2.0", "1e1"}[r.IntN(4)]
	case 2:
		b, _ := json.Marshal(randStr(r))
		return string(b)
	case 3:
		return []string{"true", "false"}[r.IntN(2)]
	case 4:
		return "null"
	case 5:
		return randObject(r, depth-1)
	default:
		return "[" + randValue(r, 0, false) + "]"
	}
}

func randObject(r *rand.Rand, depth int) string {
	var parts []string
	for _, k := range propKeys {
		if r.IntN(3) > 0 {
			parts = append(parts, strconv.Quote(k)+":"+randValue(r, max(depth, 0), false))
		}
	}
	if depth <= 0 && len(parts) > 0 {
		// no deeper objects at the bottom
		return "{" + strings.Join(parts[:1], ",") + "}"
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// RandomWhere is an expression of the SQL subset over the keys of
// RandomPayload and the attributes a and b.
func RandomWhere(r *rand.Rand) string { return randBool(r, 3) }

func randBool(r *rand.Rand, depth int) string {
	if depth > 0 {
		switch r.IntN(6) {
		case 0:
			return "(" + randBool(r, depth-1) + " && " + randBool(r, depth-1) + ")"
		case 1:
			return "(" + randBool(r, depth-1) + " || " + randBool(r, depth-1) + ")"
		case 2:
			return "!(" + randBool(r, depth-1) + ")"
		}
	}
	if r.IntN(5) == 0 {
		k := []string{"a", "b"}[r.IntN(2)]
		switch r.IntN(3) {
		case 0:
			return "has(attributes." + k + ")"
		case 1:
			return "attributes." + k + " " + []string{"==", "!=", "<", ">="}[r.IntN(4)] + " " + strconv.Quote(randStr(r))
		default:
			return "attributes[" + strconv.Quote(k) + "] in [" + strconv.Quote(randStr(r)) + ", " + strconv.Quote(randStr(r)) + "]"
		}
	}
	p := "payload"
	for i := range 1 + r.IntN(3) {
		k := propKeys[r.IntN(len(propKeys))]
		if i > 0 && r.IntN(4) == 0 {
			p += "[" + strconv.Quote(k) + "]"
		} else {
			p += "." + k
		}
	}
	switch r.IntN(5) {
	case 0:
		return "has(" + strings.TrimSuffix(p[:strings.LastIndexAny(p, ".[")], "") + "." + propKeys[r.IntN(len(propKeys))] + ")"
	case 1:
		return p + " in [" + randLit(r) + ", " + randLit(r) + "]"
	case 2:
		op := []string{"<", "<=", ">", ">="}[r.IntN(4)]
		if r.IntN(2) == 0 {
			return p + " " + op + " " + strconv.Itoa(r.IntN(7)-3)
		}
		return p + " " + op + " " + strconv.Quote(randStr(r))
	case 3:
		return randLit(r) + " == " + p
	default:
		return p + " " + []string{"==", "!="}[r.IntN(2)] + " " + randLit(r)
	}
}

func randLit(r *rand.Rand) string {
	switch r.IntN(7) {
	case 0:
		return strconv.Itoa(r.IntN(7) - 3)
	case 1:
		return []string{"1.5", "-0.5", "2.0", "10.0"}[r.IntN(4)]
	case 2:
		return strconv.Itoa(r.IntN(3)) + "u"
	case 3:
		return []string{"true", "false"}[r.IntN(2)]
	case 4:
		return "null"
	default:
		return strconv.Quote(randStr(r))
	}
}
