package workflow

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// orderYAML is the example definition.
const orderYAML = `
name: order
queue: orders            # default queue of its steps
rollback: on_fail
steps:
  - id: reserve
    kind: reserve_slot
    compensate: undo_reserve
  - id: charge
    kind: charge_card
    needs: [reserve]
    compensate: refund_card
    on_failure: halt
    retry: {max_attempts: 3, schedule: [1s, 5s]}
    timeout: 30s
  - id: notify
    kind: send_receipt
    needs: [charge]
    for_each: input.emails
  - id: undo_reserve
    kind: release_slot
    compensation: true
  - id: refund_card
    kind: refund
    compensation: true
`

func TestParseExample(t *testing.T) {
	d, err := Parse([]byte(orderYAML))
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "order" || d.Queue != "orders" || d.Rollback != OnFail || len(d.Steps) != 5 {
		t.Fatalf("parsed %+v", d)
	}
	ch := d.Step("charge")
	if ch == nil || ch.Retry == nil || ch.Retry.MaxAttempts != 3 || len(ch.Retry.Schedule) != 2 ||
		time.Duration(ch.Retry.Schedule[1]) != 5*time.Second || time.Duration(ch.Timeout) != 30*time.Second {
		t.Fatalf("charge = %+v", ch)
	}
	// The same in JSON, from its canonical form, has the same hash.
	j, err := Parse(d.Canonical())
	if err != nil {
		t.Fatalf("canonical form does not parse: %v\n%s", err, d.Canonical())
	}
	if j.Hash() != d.Hash() {
		t.Fatalf("hash changed through the canonical form:\n%s\n%s", d.Canonical(), j.Canonical())
	}
	// The builder makes the same definition.
	b, err := New("order").Queue("orders").Rollback(OnFail).
		Step("reserve", "reserve_slot").Compensate("undo_reserve").
		Step("charge", "charge_card").Needs("reserve").Compensate("refund_card").OnFailure(Halt).Retry(3, time.Second, 5*time.Second).Timeout(30*time.Second).
		Step("notify", "send_receipt").Needs("charge").ForEach("input.emails").
		Step("undo_reserve", "release_slot").Compensation().
		Step("refund_card", "refund").Compensation().
		Build()
	if err != nil {
		t.Fatal(err)
	}
	if b.Hash() != d.Hash() {
		t.Fatalf("builder's hash differs:\n%s\n%s", b.Canonical(), d.Canonical())
	}
}

func TestCanonicalDefaults(t *testing.T) {
	a := mustParse(t, `{"name":"w","steps":[{"id":"a","kind":"k"},{"id":"b","kind":"k","needs":["a","c"]},{"id":"c","kind":"k"}]}`)
	b := mustParse(t, "name: w\nqueue: default\nrollback: manual\nsteps:\n- {id: a, kind: k, queue: default, on_failure: halt}\n- {id: b, kind: k, needs: [c, a]}\n- {id: c, kind: k}\n")
	if a.Hash() != b.Hash() {
		t.Fatalf("same meaning, different hashes:\n%s\n%s", a.Canonical(), b.Canonical())
	}
	want := `{"name":"w","queue":"default","rollback":"manual","steps":[{"id":"a","kind":"k","queue":"default","on_failure":"halt"},{"id":"b","kind":"k","queue":"default","needs":["a","c"],"on_failure":"halt"},{"id":"c","kind":"k","queue":"default","on_failure":"halt"}]}`
	if got := string(a.Canonical()); got != want {
		t.Fatalf("canonical:\n got %s\nwant %s", got, want)
	}
	c := mustParse(t, `{"name":"w","steps":[{"id":"a","kind":"k2"},{"id":"b","kind":"k","needs":["a","c"]},{"id":"c","kind":"k"}]}`)
	if c.Hash() == a.Hash() {
		t.Fatal("a different kind kept the hash")
	}
}

func mustParse(t *testing.T, s string) *Definition {
	t.Helper()
	d, err := Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestParseRefusals: every refusal names the step (when there is one), the
// field and the problem.
func TestParseRefusals(t *testing.T) {
	const head = "name: w\nsteps:\n"
	for _, tc := range []struct {
		name, doc string
		step      string // the error's Step
		want      string // in the message
	}{
		{"not yaml", "name: [", "", "not valid YAML"},
		{"not a mapping", "- a\n- b\n", "", "is a mapping"},
		{"unknown top key", "name: w\nstep: []\n", "", `step: unknown key`},
		{"unknown step key", head + "- {id: a, kind: k, need: [b]}\n", "a", `need: unknown key`},
		{"unknown retry key", head + "- {id: a, kind: k, retry: {attempts: 3}}\n", "a", `retry: attempts: unknown key`},
		{"wrong type", head + "- {id: a, kind: k, needs: b}\n", "a", `needs: must be`},
		{"wrong top type", "name: [w]\nsteps: []\n", "", `name: must be`},
		{"not a number", head + "- {id: a, kind: k, priority: .nan}\n", "a", `unsupported value`},
		{"bad name", "name: 'a b'\nsteps:\n- {id: a, kind: k}\n", "", `name: "a b" must be`},
		{"bad queue", "name: w\nqueue: 'q q'\nsteps:\n- {id: a, kind: k}\n", "", `queue:`},
		{"bad rollback", "name: w\nrollback: always\nsteps:\n- {id: a, kind: k}\n", "", `rollback: "always"`},
		{"no steps", "name: w\nsteps: []\n", "", "at least one step"},
		{"bad step id", head + "- {id: a.b, kind: k}\n", "a.b", "id:"},
		{"missing id", head + "- {kind: k}\n", "#1", "id:"},
		{"duplicate id", head + "- {id: a, kind: k}\n- {id: a, kind: k}\n", "a", "duplicate step id"},
		{"no kind", head + "- {id: a}\n", "a", "kind: a step needs a kind"},
		{"bad kind", head + "- {id: a, kind: 'x y'}\n", "a", "kind:"},
		{"bad step queue", head + "- {id: a, kind: k, queue: 'x y'}\n", "a", "queue:"},
		{"unknown need", head + "- {id: reserve, kind: k}\n- {id: charge, kind: k, needs: [reserv]}\n", "charge", `needs: unknown step "reserv"`},
		{"need twice", head + "- {id: a, kind: k}\n- {id: b, kind: k, needs: [a, a]}\n", "b", "listed twice"},
		{"self need", head + "- {id: a, kind: k, needs: [a]}\n", "a", "cycle: a -> a"},
		{"cycle", head + "- {id: a, kind: k, needs: [c]}\n- {id: b, kind: k, needs: [a]}\n- {id: c, kind: k, needs: [b]}\n- {id: d, kind: k}\n", "", "cycle: "},
		{"route cycle", head + "- {id: a, kind: k}\n- {id: r1, kind: k, on_failure: 'route:r2'}\n- {id: r2, kind: k, on_failure: 'route:r1'}\n", "", "cycle: "},
		{"unknown compensate", head + "- {id: a, kind: k, compensate: undo}\n", "a", `compensate: unknown step "undo"`},
		{"compensate not compensation", head + "- {id: a, kind: k, compensate: b}\n- {id: b, kind: k}\n", "a", "not a compensation step"},
		{"compensation with needs", head + "- {id: a, kind: k, compensate: u}\n- {id: u, kind: k, compensation: true, needs: [a]}\n", "u", "needs: a compensation step"},
		{"compensation with on_failure", head + "- {id: a, kind: k, compensate: u}\n- {id: u, kind: k, compensation: true, on_failure: continue}\n", "u", "on_failure:"},
		{"compensation with for_each", head + "- {id: a, kind: k, compensate: u}\n- {id: u, kind: k, compensation: true, for_each: '[1]'}\n", "u", "for_each:"},
		{"compensation with when", head + "- {id: a, kind: k, compensate: u}\n- {id: u, kind: k, compensation: true, when: 'true'}\n", "u", "when:"},
		{"compensation needed", head + "- {id: a, kind: k, compensate: u}\n- {id: u, kind: k, compensation: true}\n- {id: b, kind: k, needs: [u]}\n", "b", "is a compensation step"},
		{"compensation named twice", head + "- {id: a, kind: k, compensate: u}\n- {id: b, kind: k, compensate: u}\n- {id: u, kind: k, compensation: true}\n", "b", `already named by step "a"`},
		{"compensation unused", head + "- {id: a, kind: k}\n- {id: u, kind: k, compensation: true}\n", "u", "no step names"},
		{"compensation compensates", head + "- {id: a, kind: k, compensate: u}\n- {id: u, kind: k, compensation: true, compensate: v}\n- {id: v, kind: k, compensation: true}\n", "u", "no compensation of its own"},
		{"bad on_failure", head + "- {id: a, kind: k, on_failure: retry}\n", "a", `on_failure: "retry" must be`},
		{"route unknown", head + "- {id: a, kind: k, on_failure: 'route:nope'}\n", "a", `route to unknown step "nope"`},
		{"route self", head + "- {id: a, kind: k, on_failure: 'route:a'}\n", "a", "to itself"},
		{"route to compensation", head + "- {id: a, kind: k, compensate: u, on_failure: 'route:u'}\n- {id: u, kind: k, compensation: true}\n", "a", "is a compensation step"},
		{"route target twice", head + "- {id: a, kind: k, on_failure: 'route:r'}\n- {id: b, kind: k, on_failure: 'route:r'}\n- {id: r, kind: k}\n", "b", "already handles"},
		{"route target with needs", head + "- {id: a, kind: k, on_failure: 'route:r'}\n- {id: b, kind: k}\n- {id: r, kind: k, needs: [b]}\n", "r", "has no needs"},
		{"bad when", head + "- {id: a, kind: k, when: 'input.x >'}\n", "a", "when: invalid CEL"},
		{"when not bool", head + "- {id: a, kind: k, when: '1 + 2'}\n", "a", "not a bool"},
		{"when unknown variable", head + "- {id: a, kind: k, when: 'inputs.x'}\n", "a", "when: invalid CEL"},
		{"bad for_each", head + "- {id: a, kind: k, for_each: 'input.('}\n", "a", "for_each: invalid CEL"},
		{"for_each not list", head + "- {id: a, kind: k, for_each: '\"x\"'}\n", "a", "not a list"},
		{"negative attempts", head + "- {id: a, kind: k, retry: {max_attempts: -1}}\n", "a", "retry: max_attempts -1"},
		{"too many attempts", head + "- {id: a, kind: k, retry: {max_attempts: 2000000}}\n", "a", "retry: max_attempts"},
		{"bad schedule", head + "- {id: a, kind: k, retry: {schedule: [soon]}}\n", "a", `invalid duration "soon"`},
		{"negative schedule", head + "- {id: a, kind: k, retry: {schedule: [-1s]}}\n", "a", "retry: schedule entry 1 is negative"},
		{"bad timeout", head + "- {id: a, kind: k, timeout: forever}\n", "a", `invalid duration "forever"`},
		{"timeout without unit", head + "- {id: a, kind: k, timeout: 30}\n", "a", "timeout: write a duration"},
		{"schedule without unit", head + "- {id: a, kind: k, retry: {schedule: [1s, 5]}}\n", "a", "retry: write each schedule entry"},
		{"negative timeout", head + "- {id: a, kind: k, timeout: -5s}\n", "a", "timeout: -5s is negative"},
		{"bad priority", head + "- {id: a, kind: k, priority: 100000}\n", "a", "priority:"},
		{"bad on_when_error", head + "- {id: a, kind: k, when: 'true', on_when_error: skip}\n", "a", `on_when_error: "skip" must be "fail" (the default) or "treat_as_false"`},
		{"seed's on_when_error name", head + "- {id: a, kind: k, when: 'true', on_when_error: fail_step}\n", "a", `on_when_error: "fail_step" must be`},
		{"on_when_error without when", head + "- {id: a, kind: k, on_when_error: treat_as_false}\n", "a", "on_when_error: the step has no when"},
		{"on_when_error not a string", head + "- {id: a, kind: k, when: 'true', on_when_error: [x]}\n", "a", "on_when_error: must be a string"},
		{"concurrency without for_each", head + "- {id: a, kind: k, concurrency: 2}\n", "a", "concurrency: only a for_each step"},
		{"negative concurrency", head + "- {id: a, kind: k, for_each: input.xs, concurrency: -1}\n", "a", "concurrency: -1 is negative"},
		{"huge concurrency", head + "- {id: a, kind: k, for_each: input.xs, concurrency: 10001}\n", "a", "concurrency: 10001 is more than 10000"},
		{"concurrency not a number", head + "- {id: a, kind: k, for_each: input.xs, concurrency: two}\n", "a", "concurrency: must be a int"},
		{"fractional concurrency", head + "- {id: a, kind: k, for_each: input.xs, concurrency: 1.5}\n", "a", "concurrency: must be a int"},
		{"budget without for_each", head + "- {id: a, kind: k, budget: 10m}\n", "a", "budget: only a for_each step"},
		{"budget without concurrency", head + "- {id: a, kind: k, for_each: input.xs, budget: 10m}\n", "a", "budget: needs a concurrency"},
		{"bad budget", head + "- {id: a, kind: k, for_each: input.xs, concurrency: 1, budget: soon}\n", "a", `invalid duration "soon"`},
		{"budget without unit", head + "- {id: a, kind: k, for_each: input.xs, concurrency: 1, budget: 600}\n", "a", "budget: write a duration"},
		{"negative budget", head + "- {id: a, kind: k, for_each: input.xs, concurrency: 1, budget: -1m}\n", "a", "budget: -1m0s is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("accepted: %+v", d)
			}
			var de *DefinitionError
			if !errors.As(err, &de) {
				t.Fatalf("error %T %v is not a *DefinitionError", err, err)
			}
			if tc.step != "" && de.Step != tc.step {
				t.Errorf("error names step %q, want %q (%v)", de.Step, tc.step, err)
			}
			if tc.step != "" && !strings.HasPrefix(err.Error(), `step "`+tc.step+`": `) {
				t.Errorf("message %q does not start with the step", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

// TestLoopOptions: on_when_error, concurrency and budget parse, survive the
// canonical form, and on_when_error: fail is the default (the same hash as
// none, so definitions written before it keep theirs).
func TestLoopOptions(t *testing.T) {
	d := mustParse(t, `
name: w
steps:
  - {id: a, kind: k, when: input.go, on_when_error: treat_as_false}
  - {id: b, kind: k, for_each: input.xs, concurrency: 3, budget: 10m}
`)
	a, b := d.Step("a"), d.Step("b")
	if a.OnWhenError != WhenErrorFalse || b.Concurrency != 3 || time.Duration(b.Budget) != 10*time.Minute {
		t.Fatalf("parsed %+v %+v", a, b)
	}
	j := mustParse(t, string(d.Canonical()))
	if j.Hash() != d.Hash() {
		t.Fatalf("hash changed through the canonical form:\n%s\n%s", d.Canonical(), j.Canonical())
	}
	built, err := New("w").Step("a", "k").When("input.go").OnWhenError(WhenErrorFalse).
		Step("b", "k").ForEach("input.xs").Concurrency(3).Budget(10 * time.Minute).Build()
	if err != nil {
		t.Fatal(err)
	}
	if built.Hash() != d.Hash() {
		t.Fatalf("builder's hash differs:\n%s\n%s", built.Canonical(), d.Canonical())
	}
	plain := mustParse(t, "name: w\nsteps:\n- {id: a, kind: k, when: input.go}\n")
	failing := mustParse(t, "name: w\nsteps:\n- {id: a, kind: k, when: input.go, on_when_error: fail}\n")
	if plain.Hash() != failing.Hash() {
		t.Fatalf("on_when_error: fail changed the hash:\n%s\n%s", plain.Canonical(), failing.Canonical())
	}
	if got := string(plain.Canonical()); strings.Contains(got, "on_when_error") || strings.Contains(got, "concurrency") || strings.Contains(got, "budget") {
		t.Fatalf("defaults written out: %s", got)
	}
	if _, err := New("w").Step("a", "k").ForEach("input.xs").Budget(time.Minute).Build(); err == nil ||
		!strings.Contains(err.Error(), "budget: needs a concurrency") {
		t.Fatalf("builder: %v", err)
	}
}

func TestCycleNamesItsSteps(t *testing.T) {
	_, err := Parse([]byte("name: w\nsteps:\n- {id: a, kind: k, needs: [c]}\n- {id: b, kind: k, needs: [a]}\n- {id: c, kind: k, needs: [b]}\n- {id: d, kind: k, needs: [a]}\n"))
	if err == nil {
		t.Fatal("cycle accepted")
	}
	msg := err.Error()
	if !strings.Contains(msg, "needs: cycle: ") {
		t.Fatalf("message %q", msg)
	}
	cyc := msg[strings.Index(msg, "cycle: ")+len("cycle: "):]
	parts := strings.Split(cyc, " -> ")
	if len(parts) != 4 || parts[0] != parts[3] {
		t.Fatalf("cycle %q is not a closed path of 3 steps", cyc)
	}
	for _, p := range parts {
		if p != "a" && p != "b" && p != "c" {
			t.Fatalf("cycle %q names a step not on it", cyc)
		}
	}
}

func TestBuilderRefuses(t *testing.T) {
	_, err := New("w").Step("a", "k").Needs("zz").Build()
	var de *DefinitionError
	if !errors.As(err, &de) || de.Step != "a" || de.Field != "needs" {
		t.Fatalf("err = %v", err)
	}
}

func TestValidRunID(t *testing.T) {
	for _, ok := range []string{"r1", "0190a8e2-7c4b-7d7e-8f00-aaaaaaaaaaaa", strings.Repeat("x", 64)} {
		if err := ValidRunID(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a.b", "-a", strings.Repeat("x", 65), "a b"} {
		if ValidRunID(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if err := ValidRunID(NewRunID()); err != nil {
		t.Fatal(err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(orderYAML))
	f.Add([]byte(`{"name":"w","steps":[{"id":"a","kind":"k","when":"input.x > 1"},{"id":"b","kind":"k","needs":["a"],"for_each":"input.items","on_failure":"route:r"},{"id":"r","kind":"k"}]}`))
	f.Add([]byte("name: w\nsteps:\n- {id: a, kind: k, needs: [a]}\n"))
	f.Add([]byte("name: w\nsteps:\n- {id: a, kind: k, retry: {max_attempts: 2, schedule: [1s]}, timeout: 1m, priority: -3}\n"))
	f.Add([]byte("name: w\nsteps:\n- {id: a, kind: k, when: input.go, on_when_error: treat_as_false}\n- {id: b, kind: k, for_each: input.xs, concurrency: 2, budget: 90s}\n"))
	f.Add([]byte("name: w\nsteps:\n- {id: a, kind: k, when: input.go, on_when_error: fail}\n- {id: b, kind: k, for_each: input.xs, concurrency: 0, budget: 0s}\n"))
	f.Add([]byte("name: w\nsla: 5m\nsteps:\n- {id: a, kind: k, sla: 30s}\n"))
	f.Add([]byte("name: w\nsla: 0s\nsteps:\n- {id: a, kind: k, sla: 1h30m}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse(data)
		if err != nil {
			return
		}
		c := d.Canonical()
		d2, err := Parse(c)
		if err != nil {
			t.Fatalf("canonical form refused: %v\n%s", err, c)
		}
		if d2.Hash() != d.Hash() {
			t.Fatalf("hash changed:\n%s\n%s", c, d2.Canonical())
		}
	})
}
