package pgstore_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// A plan's step rows and events, written by WritePlan's pipeline as one
// statement of arrays each, are the rows PutSteps and AppendEvents write
// (a VALUES row each): NULL task ids and results, NULL attributes and
// ids, empty bodies as {}, a step row named twice written once (the last), the
// events in the order given.
func TestPlanArraysWriteTheRowsOfPutStepsAndAppendEvents(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	s := b.store
	at := time.Date(2026, 11, 28, 12, 0, 0, 123456000, time.UTC)
	plan := func(run string) ([]store.StepRecord, []bt.Event) {
		steps := []store.StepRecord{
			{RunID: run, StepID: "a", TaskID: run + ".a", State: "succeeded", Result: json.RawMessage(`{"n": 1}`), CompletedSeq: 3, UpdatedAt: at},
			{RunID: run, StepID: "b", State: "waiting", UpdatedAt: at},
			{RunID: run, StepID: "c", Item: 2, TaskID: run + ".c.2", State: "pending", Error: "e", CompensationOf: "a", UpdatedAt: at},
			{RunID: run, StepID: "b", TaskID: run + ".b", State: "pending", UpdatedAt: at.Add(time.Second)}, // b again: this one
		}
		events := []bt.Event{
			store.NewEvent(at, "step.succeeded", run+".a", "q", "k", "engine", json.RawMessage(`{"result":{"n":1}}`)),
			store.NewEvent(at, "step.enqueued", run+".b", "", "", "engine", nil),
			store.NewEvent(at.Add(time.Millisecond), "run.finished", run, "", "", "", json.RawMessage(`{}`)),
		}
		events[0].Attributes = map[string]string{"run_id": run, "step_id": "a"}
		events[0].ID, events[1].ID, events[2].ID = run+"-e0", "", run+"-e2" // no id: ids NULL
		return steps, events
	}
	run := func(id string) store.RunRecord {
		return store.RunRecord{RunID: id, Workflow: "w", Version: 1, PlanHash: "h", State: "running", CreatedAt: at, UpdatedAt: at}
	}
	steps, events := plan("arrays")
	if _, err := s.WritePlan(ctx, store.PlanWrite{Inserts: []store.RunRecord{run("arrays")}, Steps: steps, Events: events}); err != nil {
		t.Fatal(err)
	}
	steps, events = plan("values")
	if err := s.InTx(ctx, func(tx store.Tx) error {
		if err := tx.InsertRun(ctx, run("values")); err != nil {
			return err
		}
		if err := tx.PutSteps(ctx, steps); err != nil {
			return err
		}
		return tx.AppendEvents(ctx, events)
	}); err != nil {
		t.Fatal(err)
	}
	read := func(run string) (stepRows, eventRows []string) {
		t.Helper()
		q := func(sql string) []string {
			rows, err := s.Pool().Query(ctx, sql, run)
			if err != nil {
				t.Fatal(err)
			}
			out, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		stepRows = q(`SELECT replace(to_jsonb(s)::text, $1, 'RUN') FROM backstop_run_steps s WHERE run_id = $1 ORDER BY step_id, item`)
		eventRows = q(`SELECT replace((to_jsonb(e) - 'seq' - 'xid')::text, $1, 'RUN') FROM backstop_events e
			WHERE subjects[1] LIKE $1 || '%' ORDER BY xid, seq`)
		return stepRows, eventRows
	}
	as, ae := read("arrays")
	vs, ve := read("values")
	if len(as) != 3 || len(ae) != 3 {
		t.Fatalf("the plan wrote %d step rows and %d events; want 3 and 3:\n%s\n%s", len(as), len(ae), strings.Join(as, "\n"), strings.Join(ae, "\n"))
	}
	for i := range as {
		if as[i] != vs[i] {
			t.Errorf("step row %d: the plan's\n%s\nPutSteps'\n%s", i, as[i], vs[i])
		}
	}
	for i := range ae {
		if ae[i] != ve[i] {
			t.Errorf("event %d: the plan's\n%s\nAppendEvents'\n%s", i, ae[i], ve[i])
		}
	}
}
