package workflow

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow/workflowtest"
)

// The engine's own harness: it keeps a run and its rows in memory, applies
// each Plan the way the store's transaction would (insert/update the run,
// upsert the rows, enqueue the tasks, append the events), and feeds
// settled tasks back as Changes. The clock is frozen unless a test moves
// it (now).

var frozen = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

type harness struct {
	t        *testing.T
	def      *Definition
	run      store.RunRecord
	rows     map[rowKey]store.StepRecord
	tasks    map[string]StepTask // every task enqueued, by id
	enqueued []string            // in order
	canceled []string
	events   []Event
	last     Plan
	// now is the time the harness passes to the engine (frozen at start)
	// and, with each event, to the history checker.
	now     time.Time
	eventAt []time.Time
}

func mustDef(t *testing.T, yaml string) *Definition {
	t.Helper()
	d, err := Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("definition: %v", err)
	}
	return d
}

func start(t *testing.T, def *Definition, input string) *harness {
	t.Helper()
	h := &harness{t: t, def: def, rows: map[rowKey]store.StepRecord{}, tasks: map[string]StepTask{}, now: frozen}
	p, err := Start(def, store.WorkflowDef{Name: def.Name, Version: 1, PlanHash: def.Hash()}, "run1", json.RawMessage(input), h.now)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	h.apply(p)
	return h
}

func (h *harness) apply(p Plan) {
	h.t.Helper()
	h.last = p
	h.run = p.Run
	for _, r := range p.Steps {
		if r.RunID != h.run.RunID {
			h.t.Fatalf("row %+v of another run", r)
		}
		h.rows[rowKey{r.StepID, r.Item}] = r
	}
	for _, task := range p.Enqueue {
		if _, dup := h.tasks[task.TaskID]; dup {
			h.t.Fatalf("task %s enqueued twice", task.TaskID)
		}
		h.tasks[task.TaskID] = task
		h.enqueued = append(h.enqueued, task.TaskID)
	}
	h.canceled = append(h.canceled, p.Cancel...)
	h.events = append(h.events, p.Events...)
	for range p.Events {
		h.eventAt = append(h.eventAt, h.now)
	}
}

func (h *harness) stepRows() []store.StepRecord {
	out := make([]store.StepRecord, 0, len(h.rows))
	for _, r := range h.rows {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].StepID != out[j].StepID {
			return out[i].StepID < out[j].StepID
		}
		return out[i].Item < out[j].Item
	})
	return out
}

func (h *harness) advance(changes ...Change) Plan {
	h.t.Helper()
	p, err := Advance(h.def, h.run, h.stepRows(), changes, h.now)
	if err != nil {
		h.t.Fatalf("Advance: %v", err)
	}
	h.apply(p)
	return p
}

func (h *harness) succeed(taskID string, result string) Plan {
	h.t.Helper()
	return h.advance(Change{TaskID: taskID, Outcome: Succeeded, Result: json.RawMessage(result)})
}

func (h *harness) die(taskID, errText string) Plan {
	h.t.Helper()
	return h.advance(Change{TaskID: taskID, Outcome: Dead, Error: errText})
}

func (h *harness) cancel() Plan {
	h.t.Helper()
	p, err := Cancel(h.def, h.run, h.stepRows(), h.now)
	if err != nil {
		h.t.Fatalf("Cancel: %v", err)
	}
	h.apply(p)
	return p
}

func (h *harness) resume(ids ...string) Plan {
	h.t.Helper()
	p, err := Resume(h.def, h.run, h.stepRows(), ids, h.now)
	if err != nil {
		h.t.Fatalf("Resume: %v", err)
	}
	h.apply(p)
	return p
}

// pending lists the task ids of pending rows, sorted.
func (h *harness) pending() []string {
	var ids []string
	for _, r := range h.rows {
		if r.State == StepPending {
			ids = append(ids, r.TaskID)
		}
	}
	slices.Sort(ids)
	return ids
}

func (h *harness) wantPending(ids ...string) {
	h.t.Helper()
	slices.Sort(ids)
	if got := h.pending(); !slices.Equal(got, ids) {
		h.t.Fatalf("pending = %v, want %v", got, ids)
	}
}

func (h *harness) wantState(s store.RunState) {
	h.t.Helper()
	if h.run.State != s {
		h.t.Fatalf("run state = %s, want %s (error %q); rows %+v", h.run.State, s, h.run.Error, h.stepRows())
	}
	if Terminal(s) != (h.run.FinishedAt != nil) {
		h.t.Fatalf("run %s: finished_at %v", s, h.run.FinishedAt)
	}
}

func (h *harness) wantRow(step string, item int, s store.StepState) store.StepRecord {
	h.t.Helper()
	r, ok := h.rows[rowKey{step, item}]
	if !ok {
		if s == StepWaiting {
			return r
		}
		h.t.Fatalf("step %s item %d has no row, want %s", step, item, s)
	}
	if r.State != s {
		h.t.Fatalf("step %s item %d is %s (%q), want %s", step, item, r.State, r.Error, s)
	}
	return r
}

// payload decodes a task's payload.
func (h *harness) payload(taskID string) map[string]any {
	h.t.Helper()
	task, ok := h.tasks[taskID]
	if !ok {
		h.t.Fatalf("task %s was never enqueued (enqueued: %v)", taskID, h.enqueued)
	}
	var m map[string]any
	if err := json.Unmarshal(task.Payload, &m); err != nil {
		h.t.Fatal(err)
	}
	return m
}

// eventTypes lists the types of the events appended so far.
func (h *harness) eventTypes() []string {
	out := make([]string, len(h.events))
	for i, e := range h.events {
		out[i] = e.Type
	}
	return out
}

// history is the events so far as workflowtest reads them.
func (h *harness) history() []workflowtest.Event {
	out := make([]workflowtest.Event, len(h.events))
	for i, e := range h.events {
		out[i] = workflowtest.Event{Type: e.Type, Body: e.Body, At: h.eventAt[i]}
	}
	return out
}

func (h *harness) hasEvent(typ, step string) bool {
	for _, e := range h.events {
		if e.Type == typ && (step == "" || e.StepID == step) {
			return true
		}
	}
	return false
}

func (h *harness) lastEventBody(typ string) map[string]any {
	h.t.Helper()
	for i := len(h.events) - 1; i >= 0; i-- {
		if h.events[i].Type == typ {
			var m map[string]any
			if err := json.Unmarshal(h.events[i].Body, &m); err != nil {
				h.t.Fatal(err)
			}
			return m
		}
	}
	h.t.Fatalf("no %s event in %v", typ, h.eventTypes())
	return nil
}

// eventBody is the body of the first event of that type for that step.
func (h *harness) eventBody(typ, step string) map[string]any {
	h.t.Helper()
	for _, e := range h.events {
		if e.Type == typ && e.StepID == step {
			var m map[string]any
			if err := json.Unmarshal(e.Body, &m); err != nil {
				h.t.Fatal(err)
			}
			return m
		}
	}
	h.t.Fatalf("no %s event for %s in %v", typ, step, h.eventTypes())
	return nil
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
