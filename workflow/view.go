package workflow

import (
	"time"

	"github.com/backstophq/backstop/store"
)

// StepView is one step of a run as the surfaces show it: the step's
// aggregate state (StepWaiting when it has no row; a fan-out step is
// failed if an item failed, else pending if one is pending) and its rows
// (one per fan-out item, or per compensated item for a compensation step).
type StepView struct {
	ID           string             `json:"id"`
	Kind         string             `json:"kind"`
	Compensation bool               `json:"compensation,omitempty"`
	State        store.StepState    `json:"state"`
	Rows         []store.StepRecord `json:"rows,omitempty"`
}

// View lists every step of def, in definition order, with the run's rows.
// Rows of steps def does not have are left out.
func View(def *Definition, steps []store.StepRecord) []StepView {
	e := newEngine(def, nil, store.RunRecord{}, nil, time.Time{})
	for i := range steps {
		r := steps[i]
		e.index(&r)
	}
	out := make([]StepView, 0, len(def.Steps))
	for _, s := range def.Steps {
		v := StepView{ID: s.ID, Kind: s.Kind, Compensation: s.Compensation, State: StepWaiting}
		for _, r := range e.rowsOf(s.ID) {
			v.Rows = append(v.Rows, *r)
		}
		switch st, _ := e.status(s.ID); st {
		case stPending:
			v.State = StepPending
		case stSucceeded:
			v.State = StepSucceeded
		case stSkipped:
			v.State = StepSkipped
		case stFailed:
			v.State = StepCanceled // unless an item failed
			for _, r := range v.Rows {
				if r.State == StepFailed {
					v.State = StepFailed
					break
				}
			}
		}
		out = append(out, v)
	}
	return out
}
