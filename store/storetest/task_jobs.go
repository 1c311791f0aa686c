package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
)

// testTaskJobs: Client.TaskJob over a real store. A dry run counts and
// samples what matches and changes nothing; a task that started running
// after the dry run is cancel-requested, its outcome saying so; each task
// changed has one event with the actor, reason and job id; a selection
// by where (Go-side too) picks only its tasks; a bad request changes
// nothing and names its field; the job is a redrive record of its kind,
// resumable from its cursor.
func (s *suite) testTaskJobs(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	for i := range 30 {
		b.enqueue(backstop.EnqueueParams{ID: fmt.Sprintf("tj-%02d", i), Queue: "tj", Kind: "k",
			Payload: json.RawMessage(fmt.Sprintf(`{"bad":%t,"n":%d}`, i%3 == 0, i))})
	}
	sel := backstop.ListParams{Queue: "tj", Where: "payload.bad == true"}
	job := func(p backstop.TaskJobParams) (backstop.RedriveProgress, error) {
		return b.c.TaskJob(b.ctx, p, nil)
	}
	for _, bad := range []struct {
		field string
		p     backstop.TaskJobParams
	}{
		{"action", backstop.TaskJobParams{Action: "explode", Filter: sel}},
		{"all", backstop.TaskJobParams{Action: backstop.TaskCancel}},
		{"all", backstop.TaskJobParams{Action: backstop.TaskCancel, Filter: sel, All: true}},
		{"priority", backstop.TaskJobParams{Action: backstop.TaskReprioritize, Filter: sel}},
		{"reason", backstop.TaskJobParams{Action: backstop.TaskDelete, Filter: sel}},
		{"states", backstop.TaskJobParams{Action: backstop.TaskDelete, Reason: "x", Filter: backstop.ListParams{States: []backstop.State{backstop.StateRunning}}}},
		{"ids", backstop.TaskJobParams{Action: backstop.TaskCancel, IDs: []string{"tj-01"}, Filter: sel}},
		{"where", backstop.TaskJobParams{Action: backstop.TaskCancel, Filter: backstop.ListParams{Where: "payload.("}}},
	} {
		_, err := job(bad.p)
		var ve *backstop.ValidationError
		if !errors.As(err, &ve) || ve.Field != bad.field {
			t.Fatalf("%+v: %v, want a ValidationError naming %s", bad.p, err, bad.field)
		}
	}
	dry, err := job(backstop.TaskJobParams{Action: backstop.TaskCancel, Filter: sel, DryRun: true, SampleSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	if dry.Preview == nil || dry.Preview.Matched != 10 || len(dry.Preview.Sample) != 3 || dry.Preview.Sample[0].ID != "tj-00" ||
		dry.Preview.Sample[0].State != backstop.StatePending {
		t.Fatalf("dry run: %+v", dry.Preview)
	}
	if got := b.get("tj-00"); got.State != backstop.StatePending {
		t.Fatalf("a dry run changed tj-00: %s", got.State)
	}
	// tj-00 starts running between the dry run and the action.
	if got := claim(t, b, "tj", 1); len(got) != 1 || got[0].ID != "tj-00" {
		t.Fatalf("claimed %v", got)
	}
	out, err := job(backstop.TaskJobParams{Action: backstop.TaskCancel, Filter: sel, Reason: "bad batch", Actor: "ops", BatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	if !out.Done || out.Kind != backstop.TaskCancel || out.Replayed != 10 || out.Failed != 0 {
		t.Fatalf("job: %+v", out)
	}
	rec, err := b.c.GetRedrive(b.ctx, out.RedriveID)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "outcomes", rec.Outcomes, map[string]int{backstop.OutcomeCancelRequested: 1, "canceled": 9})
	eq(t, "kind/status", [2]string{rec.Kind, rec.Status}, [2]string{backstop.TaskCancel, backstop.RedriveDone})
	for i := range 30 {
		id := fmt.Sprintf("tj-%02d", i)
		evs, err := b.c.Events(b.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range evs {
			if e.Type == store.EventCanceled || e.Type == store.EventCancelRequest {
				n++
				var body map[string]any
				_ = json.Unmarshal(e.Body, &body)
				if e.Actor != "ops" || body["reason"] != "bad batch" || body["job_id"] != out.RedriveID {
					t.Fatalf("%s: event %+v %s", id, e, e.Body)
				}
			}
		}
		want, state := 0, b.get(id).State
		switch {
		case i == 0:
			want = 1
			if state != backstop.StateRunning {
				t.Fatalf("tj-00 was running: %s", state)
			}
		case i%3 == 0:
			want = 1
			if state != backstop.StateCanceled {
				t.Fatalf("%s: %s", id, state)
			}
		case state != backstop.StatePending:
			t.Fatalf("%s was not selected: %s", id, state)
		}
		if n != want {
			t.Fatalf("%s: %d cancel events, want %d", id, n, want)
		}
	}
	// Picked by id: tj-03 is canceled, so skipped.
	prio := 5
	out, err = job(backstop.TaskJobParams{Action: backstop.TaskReprioritize, IDs: []string{"tj-02", "tj-01", "tj-03"}, Priority: &prio})
	if err != nil || out.Replayed != 2 || out.Failed != 1 {
		t.Fatalf("reprioritize by id: %+v %v", out, err)
	}
	eq(t, "priority", b.get("tj-01").Priority, 5)
	// A Go-side where (size() is outside the SQL subset): delete.
	out, err = job(backstop.TaskJobParams{Action: backstop.TaskDelete, Reason: "cleanup",
		Filter: backstop.ListParams{Queue: "tj", Where: "size(string(payload.n)) == 2 && payload.n < 12"}})
	if err != nil || out.Replayed != 2 || out.Failed != 0 { // tj-10 and tj-11
		t.Fatalf("delete by a Go-side where: %+v %v", out, err)
	}
	if _, err := b.c.Get(b.ctx, "tj-10"); !errors.Is(err, backstop.ErrNotFound) {
		t.Fatalf("tj-10 not deleted: %v", err)
	}
	// Stopped by its limit, the job resumes from its record (any process:
	// ResumeRedrive), with its own selection and reason.
	out, err = job(backstop.TaskJobParams{Action: backstop.TaskRunNow, All: true, Limit: 3, BatchSize: 2, Reason: "go"})
	if err != nil || out.Done || out.Replayed != 3 {
		t.Fatalf("run now, stopped by its limit: %+v %v", out, err)
	}
	again, err := b.c.ResumeRedrive(b.ctx, out.RedriveID, backstop.RedriveParams{}, nil)
	if err != nil || !again.Done || !again.Resumed || again.RedriveID != out.RedriveID || again.Kind != backstop.TaskRunNow {
		t.Fatalf("resumed: %+v %v", again, err)
	}
	rec, err = b.c.GetRedrive(b.ctx, out.RedriveID)
	if err != nil || rec.Status != backstop.RedriveDone || rec.Replayed != again.Replayed || rec.Replayed < 4 {
		t.Fatalf("the resumed job's record: %+v %v", rec, err)
	}
}
