package workflow

import (
	"errors"
	"strings"
	"testing"
)

const sinkYAML = `
name: ship
queue: wf
steps:
  - id: a
    kind: k
    sink: bus
    on_sink_fail: continue
  - id: fan
    kind: k
    needs: [a]
    for_each: input.items
    sink: bus
    sink_topic: shipped
    sink_key: all
    on_sink_fail: continue
  - id: z
    kind: k
    needs: [fan]
`

// A succeeded step with a sink publishes its result (each item's, for a
// for_each step) in the plan that settles it, with the defaults (topic
// <workflow>.<step>, key the run id) and the step's attributes; a failed
// step, or a step without a sink, publishes nothing.
func TestSinkStepPublishes(t *testing.T) {
	h := start(t, mustDef(t, sinkYAML), `{"items":[1,2]}`)
	if len(h.last.Publish) != 0 {
		t.Fatalf("Start published %+v", h.last.Publish)
	}
	p := h.succeed("run1.a", `{"n":1}`)
	if len(p.Publish) != 1 {
		t.Fatalf("published %+v, want a's result", p.Publish)
	}
	m := p.Publish[0]
	if m.Sink != "bus" || m.Topic != "ship.a" || m.Key != "run1" || string(m.Payload) != `{"n":1}` || m.TaskID != "run1.a" {
		t.Fatalf("message %+v", m)
	}
	if a := m.Attributes; a[AttrRunID] != "run1" || a[AttrWorkflow] != "ship" || a[AttrStepID] != "a" || a[AttrPlanHash] != h.def.Hash() || a[AttrStepItem] != "" {
		t.Fatalf("attributes %v", a)
	}
	// Applying the same change again publishes nothing (the row settled).
	if p := h.succeed("run1.a", `{"n":1}`); len(p.Publish) != 0 {
		t.Fatalf("a second settlement published %+v", p.Publish)
	}
	p = h.succeed("run1.fan.1", `"r1"`)
	if len(p.Publish) != 1 || p.Publish[0].Topic != "shipped" || p.Publish[0].Key != "all" ||
		p.Publish[0].Attributes[AttrStepItem] != "1" || string(p.Publish[0].Payload) != `"r1"` {
		t.Fatalf("item message %+v", p.Publish)
	}
	if p := h.die("run1.fan.0", "boom"); len(p.Publish) != 0 {
		t.Fatalf("a failed item published %+v", p.Publish)
	}
}

// Validation names the field.
func TestSinkStepValidation(t *testing.T) {
	for _, c := range []struct{ step, field, want string }{
		{"sink: bus\n    on_sink_fail: retry", "on_sink_fail", "must be"},
		{"sink: 'has space'\n    on_sink_fail: continue", "sink", "must be"},
		{"sink: " + strings.Repeat("s", 124) + "\n    on_sink_fail: continue", "sink", "must be"},
		{"sink: bus\n    sink_topic: 'a b'\n    on_sink_fail: continue", "sink_topic", "without spaces"},
		{"sink: bus\n    sink_key: " + strings.Repeat("k", 1025) + "\n    on_sink_fail: continue", "sink_key", "1024"},
		{"sink_topic: t", "sink_topic", "only a step with a sink"},
		{"sink_key: k", "sink_key", "only a step with a sink"},
		{"on_sink_fail: continue", "on_sink_fail", "only a step with a sink"},
		{"sink: [x]", "sink", "must be a string"},
	} {
		_, err := Parse([]byte("name: w\nsteps:\n  - id: a\n    kind: k\n    " + c.step + "\n"))
		var de *DefinitionError
		if !errors.As(err, &de) || de.Field != c.field || !strings.Contains(de.Problem, c.want) {
			t.Errorf("%q: %v, want field %s: %s", c.step, err, c.field, c.want)
		}
	}
	// A compensation step publishes nothing.
	_, err := Parse([]byte("name: w\nsteps:\n  - id: a\n    kind: k\n    compensate: u\n  - id: u\n    kind: k\n    compensation: true\n    sink: bus\n    on_sink_fail: continue\n"))
	var de *DefinitionError
	if !errors.As(err, &de) || de.Step != "u" || de.Field != "sink" {
		t.Errorf("sink on a compensation: %v", err)
	}
	// Sink names follow the relay's rule: 123 characters is the most.
	if _, err := Parse([]byte("name: w\nsteps:\n  - id: a\n    kind: k\n    sink: " + strings.Repeat("s", 123) + "\n    on_sink_fail: continue\n")); err != nil {
		t.Errorf("a 123-character sink name: %v", err)
	}
}

// The canonical form holds the sink fields with their defaults filled in:
// changing the sink changes the hash, writing a default out does not, and
// a definition without a sink keeps the hash it had before sinks existed.
func TestSinkStepHash(t *testing.T) {
	base := "name: w\nsteps:\n  - id: a\n    kind: k\n"
	withSink := func(extra string) *Definition { return mustDef(t, base+"    on_sink_fail: continue\n"+extra) }
	bus := withSink("    sink: bus\n")
	if h := mustDef(t, base).Hash(); h == bus.Hash() {
		t.Fatal("adding a sink kept the hash")
	}
	if withSink("    sink: log\n").Hash() == bus.Hash() {
		t.Fatal("changing the sink kept the hash")
	}
	if withSink("    sink: bus\n    sink_topic: other\n").Hash() == bus.Hash() {
		t.Fatal("changing the topic kept the hash")
	}
	if withSink("    sink: bus\n    sink_topic: w.a\n").Hash() != bus.Hash() {
		t.Fatal("writing the default topic out changed the hash")
	}
	if got, want := string(mustDef(t, base).Canonical()), `{"name":"w","queue":"default","rollback":"manual","steps":[{"id":"a","kind":"k","queue":"default","on_failure":"halt"}]}`; got != want {
		t.Fatalf("a definition without a sink: canonical %s, want %s", got, want)
	}
	back, err := Parse(bus.Canonical())
	if err != nil || back.Hash() != bus.Hash() || back.Steps[0].Sink != "bus" || back.Steps[0].SinkTopic != "w.a" {
		t.Fatalf("canonical form round trip: %v %+v", err, back)
	}
	b, err := New("w").Step("a", "k").Sink("bus", SinkContinue).Build()
	if err != nil || b.Hash() != bus.Hash() {
		t.Fatalf("builder: %v", err)
	}
}

const sinkHaltYAML = `
name: ship
queue: wf
steps:
  - id: a
    kind: k
    sink: bus
  - id: b
    kind: k
    needs: [a]
`

// on_sink_fail: halt (the default): the step's row keeps its result and
// waits for its message (<task>.sink, published in the same plan); the
// steps that need it start when the message is delivered, with the step's
// result. A dead message fails the step and halts the run; replaying it
// resumes the run, and its delivery lets the run go on.
func TestSinkStepHaltWaitsForDelivery(t *testing.T) {
	def := mustDef(t, sinkHaltYAML)
	if def.Steps[0].OnSinkFail != "" || !strings.Contains(string(def.Canonical()), `"on_sink_fail":"halt"`) {
		t.Fatalf("canonical %s, want the default halt filled in", def.Canonical())
	}
	h := start(t, def, `{}`)
	p := h.succeed("run1.a", `{"n":1}`)
	if len(p.Publish) != 1 || p.Publish[0].ID != "run1.a.sink" || p.Publish[0].TaskID != "run1.a" || string(p.Publish[0].Payload) != `{"n":1}` {
		t.Fatalf("published %+v, want a's result as message run1.a.sink", p.Publish)
	}
	h.wantPending("run1.a.sink")
	if r := h.wantRow("a", 0, StepPending); string(r.Result) != `{"n":1}` {
		t.Fatalf("a's row holds %s while its message is delivered", r.Result)
	}
	if b := h.eventBody(EventStepDelivering, "a"); b["task_id"] != "run1.a" || b["message_id"] != "run1.a.sink" || b["sink"] != "bus" {
		t.Fatalf("step.delivering %v", b)
	}
	// A second settlement of the step's task changes nothing.
	if p := h.succeed("run1.a", `{"n":2}`); !p.Empty() || len(p.Publish) != 0 {
		t.Fatalf("a repeated settlement planned %+v", p)
	}
	// Delivered: a succeeds with its own result (not the relay's), b starts.
	if p := h.succeed("run1.a.sink", ``); len(p.Publish) != 0 {
		t.Fatalf("the delivery published again: %+v", p.Publish)
	}
	if r := h.wantRow("a", 0, StepSucceeded); string(r.Result) != `{"n":1}` {
		t.Fatalf("a's result %s", r.Result)
	}
	h.wantPending("run1.b")
	if got := jsonString(h.payload("run1.b")["results"]); got != `{"a":{"n":1}}` {
		t.Fatalf("b's results %s", got)
	}
	h.succeed("run1.b", `"ok"`)
	h.wantState(RunSucceeded)
	h.checkHistory()

	// Dead message: a fails with the sink's error, the run halts; a replay
	// of the message resumes it.
	h = start(t, def, `{}`)
	h.succeed("run1.a", `{"n":1}`)
	h.die("run1.a.sink", "hook: 400 Bad Request")
	h.wantState(RunFailed)
	if r := h.wantRow("a", 0, StepFailed); r.Error != "hook: 400 Bad Request" {
		t.Fatalf("a's error %q", r.Error)
	}
	if _, ok := h.tasks["run1.b"]; ok {
		t.Fatal("b started although a's message is dead")
	}
	h.resume("run1.a.sink")
	h.wantState(RunRunning)
	h.wantPending("run1.a.sink")
	h.succeed("run1.a.sink", ``)
	h.wantPending("run1.b")
	h.succeed("run1.b", `"ok"`)
	h.wantState(RunSucceeded)
	h.checkHistory()
}

// A for_each step under halt: each item waits for its own message
// (<item task>.sink); the steps that need it start once every item's
// message is delivered, with the items' results in item order.
func TestSinkStepHaltForEach(t *testing.T) {
	h := start(t, mustDef(t, `
name: fan
queue: wf
steps:
  - id: f
    kind: k
    for_each: input.xs
    concurrency: 1
    sink: bus
  - id: z
    kind: k
    needs: [f]
`), `{"xs":[1,2]}`)
	h.wantPending("run1.f.0")
	p := h.succeed("run1.f.0", `"r0"`)
	if len(p.Publish) != 1 || p.Publish[0].ID != "run1.f.0.sink" || p.Publish[0].Attributes[AttrStepItem] != "0" {
		t.Fatalf("published %+v", p.Publish)
	}
	h.wantPending("run1.f.0.sink") // the item holds its slot until delivered
	h.succeed("run1.f.0.sink", ``)
	h.wantPending("run1.f.1")
	h.succeed("run1.f.1", `"r1"`)
	h.wantPending("run1.f.1.sink")
	h.succeed("run1.f.1.sink", ``)
	h.wantPending("run1.z")
	if got := jsonString(h.payload("run1.z")["results"]); got != `{"f":["r0","r1"]}` {
		t.Fatalf("z's results %s", got)
	}
	h.succeed("run1.z", `"ok"`)
	h.wantState(RunSucceeded)
	h.checkHistory()
}

// on_sink_fail: dead_letter: the step waits for its message as under halt
// (the message's id is <task>.sink.<n>, new at each publication). A dead
// message makes the step's own task the dead letter (Plan.DeadLetter, with
// the message's error) and fails the step; replaying the step's task
// resumes the run, and its new success publishes a new message, whose
// delivery lets the run go on with the new result.
func TestSinkStepDeadLetter(t *testing.T) {
	def := mustDef(t, strings.Replace(sinkHaltYAML, "sink: bus", "sink: bus\n    on_sink_fail: dead_letter", 1))
	if _, err := Parse(def.Canonical()); err != nil || !strings.Contains(string(def.Canonical()), `"on_sink_fail":"dead_letter"`) {
		t.Fatalf("canonical %s: %v", def.Canonical(), err)
	}
	h := start(t, def, `{}`)
	p := h.succeed("run1.a", `{"n":1}`)
	if len(p.Publish) != 1 || p.Publish[0].ID != "run1.a.sink.1" || p.Publish[0].TaskID != "run1.a" {
		t.Fatalf("published %+v, want message run1.a.sink.1", p.Publish)
	}
	h.wantPending("run1.a.sink.1")
	if len(p.DeadLetter) != 0 {
		t.Fatalf("dead letters %+v before the message died", p.DeadLetter)
	}
	p = h.die("run1.a.sink.1", "hook: 400 Bad Request")
	if len(p.DeadLetter) != 1 || p.DeadLetter[0] != (StepDeadLetter{TaskID: "run1.a", MessageID: "run1.a.sink.1", Sink: "bus", StepID: "a",
		Error: "hook: 400 Bad Request"}) {
		t.Fatalf("dead letters %+v, want the step's task", p.DeadLetter)
	}
	if b := h.eventBody(EventStepDeadLettered, "a"); b["task_id"] != "run1.a" || b["message_id"] != "run1.a.sink.1" || b["error"] != "hook: 400 Bad Request" {
		t.Fatalf("step.dead_lettered %v", b)
	}
	if r := h.wantRow("a", 0, StepFailed); r.TaskID != "run1.a" || r.Error != "hook: 400 Bad Request" {
		t.Fatalf("a's row %+v, want failed on its own task", r)
	}
	h.wantState(RunFailed)
	if _, ok := h.tasks["run1.b"]; ok {
		t.Fatal("b started although a's message is dead")
	}
	// The dead message's replay is not the step's: the run does not move.
	if p := h.resume("run1.a.sink.1"); len(p.Steps) != 0 {
		t.Fatalf("a replay of the message resumed the step: %+v", p.Steps)
	}
	// Replaying the step's task: it runs again; its new result is a new
	// message, whose delivery lets b start with that result.
	h.resume("run1.a")
	h.wantState(RunRunning)
	h.wantPending("run1.a")
	p = h.succeed("run1.a", `{"n":2}`)
	if len(p.Publish) != 1 || p.Publish[0].ID != "run1.a.sink.2" || string(p.Publish[0].Payload) != `{"n":2}` {
		t.Fatalf("published %+v, want message run1.a.sink.2", p.Publish)
	}
	h.wantPending("run1.a.sink.2")
	h.succeed("run1.a.sink.2", ``)
	if r := h.wantRow("a", 0, StepSucceeded); string(r.Result) != `{"n":2}` {
		t.Fatalf("a's result %s", r.Result)
	}
	h.wantPending("run1.b")
	if got := jsonString(h.payload("run1.b")["results"]); got != `{"a":{"n":2}}` {
		t.Fatalf("b's results %s", got)
	}
	h.succeed("run1.b", `"ok"`)
	h.wantState(RunSucceeded)
	h.checkHistory()

	if !IsSinkMessage("r.a.sink") || !IsSinkMessage("r.a.0.sink.12") || IsSinkMessage("r.a.sink.x") || IsSinkMessage("r.a.sink.") || IsSinkMessage("r.a") {
		t.Fatal("IsSinkMessage")
	}
}

// A for_each step under dead_letter: each item's message has its own id;
// a dead one makes that item's task the dead letter and fails the step;
// replaying the item runs it again and its new message lets the run go on.
func TestSinkStepDeadLetterForEach(t *testing.T) {
	h := start(t, mustDef(t, `
name: fan
queue: wf
steps:
  - id: f
    kind: k
    for_each: input.xs
    sink: bus
    on_sink_fail: dead_letter
  - id: z
    kind: k
    needs: [f]
`), `{"xs":[1,2]}`)
	p := h.succeed("run1.f.0", `"r0"`)
	if len(p.Publish) != 1 || p.Publish[0].ID != "run1.f.0.sink.1" || p.Publish[0].TaskID != "run1.f.0" {
		t.Fatalf("published %+v", p.Publish)
	}
	p = h.succeed("run1.f.1", `"r1"`)
	if len(p.Publish) != 1 || p.Publish[0].ID != "run1.f.1.sink.2" {
		t.Fatalf("published %+v", p.Publish)
	}
	h.succeed("run1.f.0.sink.1", ``)
	p = h.die("run1.f.1.sink.2", "too large")
	if len(p.DeadLetter) != 1 || p.DeadLetter[0].TaskID != "run1.f.1" || p.DeadLetter[0].Item != 1 {
		t.Fatalf("dead letters %+v", p.DeadLetter)
	}
	h.wantState(RunFailed)
	h.resume("run1.f.1")
	h.wantPending("run1.f.1")
	p = h.succeed("run1.f.1", `"r1b"`)
	if len(p.Publish) != 1 || p.Publish[0].ID == "run1.f.1.sink.2" || !IsSinkMessage(p.Publish[0].ID) {
		t.Fatalf("republished %+v, want a new message id", p.Publish)
	}
	h.succeed(p.Publish[0].ID, ``)
	h.wantPending("run1.z")
	if got := jsonString(h.payload("run1.z")["results"]); got != `{"f":["r0","r1b"]}` {
		t.Fatalf("z's results %s", got)
	}
	h.succeed("run1.z", `"ok"`)
	h.wantState(RunSucceeded)
	h.checkHistory()
}
