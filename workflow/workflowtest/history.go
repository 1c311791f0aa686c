// Package workflowtest checks a workflow run's history — the events of its
// stream run.<run id>, in log order — against the rules a run must keep
// whatever happens between its events (docs/workflows.md): the engine's
// own tests, the stores' rules test and the crash tests all hand it what
// they saw. It reads events as JSON and never imports the engine, so the
// engine's internal tests can use it.
package workflowtest

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Step is what the checker needs of a definition's step.
type Step struct {
	ID           string   `json:"id"`
	Needs        []string `json:"needs"`
	Compensate   string   `json:"compensate"`
	Compensation bool     `json:"compensation"`
	// Concurrency and Budget: a for_each step's bound on its items at
	// once, and on the time in which they start (a Go duration; "" none).
	Concurrency int    `json:"concurrency"`
	Budget      string `json:"budget"`
}

// Def is what the checker needs of a definition: its steps and whether a
// halt or a cancel rolls back (rollback: on_fail).
type Def struct {
	Steps    []Step `json:"steps"`
	Rollback string `json:"rollback"`
}

// ParseDef reads a definition's JSON (a workflow.Definition marshalled, or
// the API's definition).
func ParseDef(definition []byte) (Def, error) {
	var d Def
	if err := json.Unmarshal(definition, &d); err != nil {
		return Def{}, fmt.Errorf("workflowtest: definition: %v", err)
	}
	for _, s := range d.Steps {
		if s.Budget != "" {
			if _, err := time.ParseDuration(s.Budget); err != nil {
				return Def{}, fmt.Errorf("workflowtest: definition: step %s: budget: %v", s.ID, err)
			}
		}
	}
	return d, nil
}

// budget is the step's budget (0: none; ParseDef checked it).
func (s *Step) budget() time.Duration {
	d, _ := time.ParseDuration(s.Budget)
	return d
}

// DefOf is ParseDef of a definition value (a *workflow.Definition): its
// JSON.
func DefOf(definition any) (Def, error) {
	b, err := json.Marshal(definition)
	if err != nil {
		return Def{}, fmt.Errorf("workflowtest: definition: %v", err)
	}
	return ParseDef(b)
}

// OnFail reports whether a halt or a cancel rolls back.
func (d Def) OnFail() bool { return d.Rollback == "on_fail" }

// Event is one event of the run's stream: its type and its JSON body (the
// engine's bodies carry step_id, task_id, item, compensation_of, state,
// tasks), and when it was planned (zero: unknown; the budget rule then
// passes it over).
type Event struct {
	Type string
	Body json.RawMessage
	At   time.Time
}

type body struct {
	StepID         string   `json:"step_id"`
	TaskID         string   `json:"task_id"`
	Item           int      `json:"item"`
	CompensationOf string   `json:"compensation_of"`
	State          string   `json:"state"`
	Tasks          []string `json:"tasks"`
	MessageID      string   `json:"message_id"`
}

type row struct {
	step string
	item int
}

// Check replays events and returns the first broken rule, or nil:
//
//   - no run.finished or run.halted while one of the run's step tasks is
//     enqueued and not settled (a run never finishes while a step runs);
//   - no compensation is enqueued while a step task (not a compensation)
//     of the run is unsettled, nor while another compensation is;
//   - no compensation of a step is enqueued before every succeeded row of
//     every step that depends on it (directly or not), and has a
//     compensate, was undone;
//   - a run that ended compensated, or canceled with on_fail, undid every
//     succeeded row of every step with a compensate exactly once; a run
//     that ended otherwise (succeeded, partial, failed, canceled without
//     on_fail) ran no compensation;
//   - a step's items are enqueued in item order, each once; a step with a
//     concurrency never has more of its items unsettled at once; a step
//     with a budget enqueues no item once the budget, counted from its
//     first item's enqueue, ran out (when the events' times are known).
//
// Finished reports the run's last final state ("" when it has not
// stopped).
func Check(def Def, events []Event) (finished string, err error) {
	steps := map[string]*Step{}
	for i := range def.Steps {
		steps[def.Steps[i].ID] = &def.Steps[i]
	}
	// dependents[s]: the steps that need s, directly or not.
	dependents := map[string][]string{}
	for _, s := range def.Steps {
		seen := map[string]bool{}
		var walk func(string)
		walk = func(id string) {
			st := steps[id]
			if st == nil {
				return
			}
			for _, n := range st.Needs {
				if !seen[n] {
					seen[n] = true
					dependents[n] = append(dependents[n], s.ID)
					walk(n)
				}
			}
		}
		walk(s.ID)
	}
	open := map[string]bool{}     // unsettled step tasks
	compTask := map[string]bool{} // task ids of compensations
	succeeded := map[row]bool{}   // rows (not compensations) that succeeded, with a task
	undone := map[row]int{}       // undone rows: compensations succeeded, by the row they undo
	compEnqueued := map[row]int{} // compensations enqueued, by the row they undo
	stepOf := map[string]string{} // task id -> its step (not a compensation)
	nextItem := map[string]int{}  // step -> the next item to enqueue
	started := map[string]time.Time{}
	openOf := func(step string) int {
		n := 0
		for id := range open {
			if stepOf[id] == step {
				n++
			}
		}
		return n
	}
	for i, ev := range events {
		var b body
		if len(ev.Body) > 0 {
			if err := json.Unmarshal(ev.Body, &b); err != nil {
				return "", fmt.Errorf("event %d (%s): body: %v", i, ev.Type, err)
			}
		}
		at := func(format string, args ...any) error {
			return fmt.Errorf("event %d (%s %s %s): %s", i, ev.Type, b.StepID, b.TaskID, fmt.Sprintf(format, args...))
		}
		switch ev.Type {
		case "step.enqueued":
			if b.TaskID == "" {
				continue
			}
			if b.CompensationOf != "" {
				undo := row{b.CompensationOf, b.Item}
				for id := range open {
					if compTask[id] {
						return "", at("a compensation started while compensation %s runs", id)
					}
					return "", at("a compensation started while step task %s runs", id)
				}
				for _, d := range dependents[b.CompensationOf] {
					if steps[d] == nil || steps[d].Compensate == "" {
						continue
					}
					for r := range succeeded {
						if r.step == d && undone[r] == 0 {
							return "", at("%s undone before %s (item %d), which needs it, was undone", b.CompensationOf, d, r.item)
						}
					}
				}
				compEnqueued[undo]++
				compTask[b.TaskID] = true
			} else {
				if b.Item != nextItem[b.StepID] {
					return "", at("item %d enqueued, the next in item order is %d", b.Item, nextItem[b.StepID])
				}
				nextItem[b.StepID]++
				stepOf[b.TaskID] = b.StepID
				if s := steps[b.StepID]; s != nil && !ev.At.IsZero() {
					first, ok := started[b.StepID]
					if !ok {
						started[b.StepID], first = ev.At, ev.At
					}
					if d := s.budget(); d > 0 && !ev.At.Before(first.Add(d)) {
						return "", at("item %d enqueued at %s, after the budget %s of its step ran out (started %s)",
							b.Item, ev.At.Format(time.RFC3339), d, first.Format(time.RFC3339))
					}
				}
			}
			open[b.TaskID] = true
			if s := steps[b.StepID]; s != nil && s.Concurrency > 0 && b.CompensationOf == "" {
				if n := openOf(b.StepID); n > s.Concurrency {
					return "", at("%d items of the step unsettled at once, more than its concurrency %d", n, s.Concurrency)
				}
			}
		case "step.succeeded":
			if b.TaskID == "" {
				continue // an empty fan-out: no task
			}
			delete(open, b.TaskID)
			if b.CompensationOf != "" {
				undone[row{b.CompensationOf, b.Item}]++
			} else {
				succeeded[row{b.StepID, b.Item}] = true
			}
		case "step.failed":
			if b.TaskID != "" {
				delete(open, b.TaskID)
			}
		case "step.delivering":
			// The step's task is done; its message settles the step.
			delete(open, b.TaskID)
			open[b.MessageID] = true
		case "step.dead_lettered":
			// The step's message died (on_sink_fail: dead_letter): settled.
			delete(open, b.MessageID)
		case "run.resumed":
			for _, id := range b.Tasks {
				open[id] = true
			}
			for _, id := range b.Tasks {
				if s := steps[stepOf[id]]; s != nil && s.Concurrency > 0 {
					if n := openOf(s.ID); n > s.Concurrency {
						return "", at("a replay left %d items of step %s unsettled at once, more than its concurrency %d", n, s.ID, s.Concurrency)
					}
				}
			}
			finished = ""
		case "run.finished", "run.halted":
			if len(open) > 0 {
				ids := make([]string, 0, len(open))
				for id := range open {
					ids = append(ids, id)
				}
				slices.Sort(ids)
				return "", at("the run stopped (%s) while step tasks %v were unsettled", b.State, ids)
			}
			finished = b.State
		}
	}
	switch finished {
	case "compensated", "canceled":
		if finished == "canceled" && !def.OnFail() {
			break
		}
		for r := range succeeded {
			if s := steps[r.step]; s == nil || s.Compensate == "" {
				continue
			}
			if undone[r] != 1 {
				return finished, fmt.Errorf("the run ended %s, and step %s item %d was undone %d times, want once", finished, r.step, r.item, undone[r])
			}
		}
		return finished, nil
	}
	if finished != "" && finished != "compensation_failed" {
		for r, n := range compEnqueued {
			if n > 0 {
				return finished, fmt.Errorf("the run ended %s, and ran the compensation of step %s item %d", finished, r.step, r.item)
			}
		}
	}
	return finished, nil
}
