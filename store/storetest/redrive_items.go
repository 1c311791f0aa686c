package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
)

// testRedriveItems: a redrive is a durable job whose every item's outcome
// is recorded with its replay (issue 17): the set-based batch and the
// per-row (patched) path record replayed, conflict and unprocessable; the
// outcomes add up to the record's counts; a redrive canceled from outside
// stops after its batch and ResumeRedrive continues it from its cursor
// with its filter and patch, replaying each dead letter once.
func (s *suite) testRedriveItems(t *testing.T) {
	t.Run("Batch", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		for i := range 10 {
			b.enqueue(backstop.EnqueueParams{ID: fmt.Sprintf("t%02d", i), Queue: "a", Kind: "k", IdempotencyKey: fmt.Sprint("key", i)})
		}
		b.kill("a", "x")
		b.enqueue(backstop.EnqueueParams{ID: "holder", Queue: "c", Kind: "k", IdempotencyKey: "key3"})
		res, err := b.c.Redrive(b.ctx, backstop.RedriveParams{Filter: backstop.ListParams{Queue: "a"}, BatchSize: 4}, nil)
		if err != nil || res.Replayed != 9 || res.Failed != 1 {
			t.Fatalf("redrive: %+v %v", res, err)
		}
		rec, err := b.c.GetRedrive(b.ctx, res.RedriveID)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "status", rec.Status, backstop.RedriveDone)
		eq(t, "outcomes", rec.Outcomes, map[string]int{"replayed": 9, "conflict": 1})
		eq(t, "counts", [2]int{rec.Replayed, rec.Failed}, [2]int{9, 1})
		failed, err := b.c.RedriveItems(b.ctx, backstop.RedriveItemsParams{ID: res.RedriveID, Failed: true})
		if err != nil || len(failed) != 1 || failed[0].TaskID != "t03" || failed[0].Outcome != backstop.OutcomeConflict || failed[0].Detail == "" {
			t.Fatalf("failed items: %+v %v", failed, err)
		}
		all, err := b.c.RedriveItems(b.ctx, backstop.RedriveItemsParams{ID: res.RedriveID, Limit: 5})
		if err != nil || len(all) != 5 || all[0].TaskID != "t00" {
			t.Fatalf("items: %+v %v", all, err)
		}
		more, err := b.c.RedriveItems(b.ctx, backstop.RedriveItemsParams{ID: res.RedriveID, AfterID: all[4].TaskID})
		if err != nil || len(more) != 5 || more[0].TaskID != "t05" {
			t.Fatalf("items after t04: %+v %v", more, err)
		}
		if _, err := b.c.RedriveItems(b.ctx, backstop.RedriveItemsParams{ID: res.RedriveID, Outcomes: []string{"bogus"}}); !errors.Is(err, backstop.ErrInvalid) {
			t.Fatalf("bogus outcome: %v", err)
		}
		if _, err := b.c.RedriveItems(b.ctx, backstop.RedriveItemsParams{ID: "nope"}); !errors.Is(err, backstop.ErrNotFound) {
			t.Fatalf("unknown redrive: %v", err)
		}
		if _, err := b.c.GetRedrive(b.ctx, "nope"); !errors.Is(err, backstop.ErrNotFound) {
			t.Fatalf("unknown redrive: %v", err)
		}
		// A second redrive: the list is newest first, and pages on.
		b.clock.Advance(time.Second)
		res2, err := b.c.Redrive(b.ctx, backstop.RedriveParams{Filter: backstop.ListParams{Queue: "none"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		list, err := b.c.Redrives(b.ctx, "", 10)
		if err != nil || len(list) != 2 || list[0].ID != res2.RedriveID || list[1].ID != res.RedriveID {
			t.Fatalf("list: %+v %v", list, err)
		}
		list, err = b.c.Redrives(b.ctx, res2.RedriveID, 10)
		if err != nil || len(list) != 1 || list[0].ID != res.RedriveID {
			t.Fatalf("list before the newest: %+v %v", list, err)
		}
	})

	t.Run("Patched", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		for i := range 6 {
			payload := `{"v":1}`
			if i == 4 {
				payload = `{"s":"scalar"}`
			}
			b.enqueue(backstop.EnqueueParams{ID: fmt.Sprintf("p%d", i), Queue: "p", Kind: "k", Payload: json.RawMessage(payload),
				IdempotencyKey: fmt.Sprint("pk", i)})
		}
		b.kill("p", "x")
		b.enqueue(backstop.EnqueueParams{ID: "holder", Queue: "c", Kind: "k", IdempotencyKey: "pk1"})
		op, _ := backstop.ParsePatch("s.x=2")
		res, err := b.c.Redrive(b.ctx, backstop.RedriveParams{Filter: backstop.ListParams{Queue: "p"}, Patch: []backstop.PatchOp{op}, BatchSize: 4}, nil)
		if err != nil || res.Replayed != 4 || res.Failed != 2 {
			t.Fatalf("redrive: %+v %v", res, err)
		}
		rec, err := b.c.GetRedrive(b.ctx, res.RedriveID)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "outcomes", rec.Outcomes, map[string]int{"replayed": 4, "conflict": 1, "unprocessable": 1})
		failed, err := b.c.RedriveItems(b.ctx, backstop.RedriveItemsParams{ID: res.RedriveID, Failed: true})
		if err != nil || len(failed) != 2 || failed[0].TaskID != "p1" || failed[0].Outcome != "conflict" ||
			failed[1].TaskID != "p4" || failed[1].Outcome != "unprocessable" || failed[1].Detail == "" {
			t.Fatalf("failed items: %+v %v", failed, err)
		}
		only, err := b.c.RedriveItems(b.ctx, backstop.RedriveItemsParams{ID: res.RedriveID, Outcomes: []string{"unprocessable"}})
		if err != nil || len(only) != 1 || only[0].TaskID != "p4" {
			t.Fatalf("unprocessable items: %+v %v", only, err)
		}
	})

	t.Run("CancelAndResume", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		for i := range 20 {
			b.enqueue(backstop.EnqueueParams{ID: fmt.Sprintf("r%02d", i), Queue: "r", Kind: "k", Payload: json.RawMessage(`{"v":1}`)})
		}
		b.kill("r", "x")
		op, _ := backstop.ParsePatch("fixed=true")
		canceled := false
		p := backstop.RedriveParams{Filter: backstop.ListParams{Queue: "r"}, Patch: []backstop.PatchOp{op}, BatchSize: 5, Reason: "outage over"}
		res, err := b.c.Redrive(b.ctx, p, func(pr backstop.RedriveProgress) {
			if pr.Replayed >= 5 && !canceled {
				canceled = true
				if rec, err := b.c.CancelRedrive(b.ctx, pr.RedriveID); err != nil || rec.Status != backstop.RedriveCanceled {
					t.Errorf("cancel: %+v %v", rec, err)
				}
			}
		})
		if !errors.Is(err, backstop.ErrRedriveCanceled) || !errors.Is(err, backstop.ErrInterrupted) || res.Replayed == 20 {
			t.Fatalf("canceled run: %+v %v", res, err)
		}
		rec, err := b.c.GetRedrive(b.ctx, res.RedriveID)
		if err != nil || rec.Status != backstop.RedriveCanceled || rec.FinishedAt == nil || rec.Replayed != res.Replayed {
			t.Fatalf("canceled record: %+v %v", rec, err)
		}
		// Cancel again: answered as it is.
		if again, err := b.c.CancelRedrive(b.ctx, res.RedriveID); err != nil || again.Status != backstop.RedriveCanceled {
			t.Fatalf("cancel again: %+v %v", again, err)
		}
		if _, err := b.c.CancelRedrive(b.ctx, "nope"); !errors.Is(err, backstop.ErrNotFound) {
			t.Fatalf("cancel unknown: %v", err)
		}
		b.clock.Advance(time.Second)
		fin, err := b.c.ResumeRedrive(b.ctx, res.RedriveID, backstop.RedriveParams{Actor: "bob"}, nil)
		if err != nil || !fin.Resumed || fin.RedriveID != res.RedriveID || !fin.Done || fin.Replayed != 20 {
			t.Fatalf("resume: %+v %v", fin, err)
		}
		for i := range 20 {
			task := b.get(fmt.Sprintf("r%02d", i))
			eq(t, "replay_count of "+task.ID, task.ReplayCount, 1)
			eq(t, "patched "+task.ID, string(task.Payload), `{"fixed":true,"v":1}`)
		}
		rec, err = b.c.GetRedrive(b.ctx, res.RedriveID)
		if err != nil || rec.Status != backstop.RedriveDone || rec.Outcomes["replayed"] != 20 || len(rec.Outcomes) != 1 {
			t.Fatalf("resumed record: %+v %v", rec, err)
		}
		if _, err := b.c.ResumeRedrive(b.ctx, res.RedriveID, backstop.RedriveParams{}, nil); !errors.Is(err, backstop.ErrConflict) {
			t.Fatalf("resume a finished redrive: %v", err)
		}
	})

	t.Run("Store", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		st := b.store
		now := b.clock.Now()
		rec, _, err := st.StartRedrive(b.ctx, store.Redrive{ID: "rd1", FilterKey: "k", Filter: json.RawMessage(`{}`), Snapshot: now, StartedAt: now})
		if err != nil {
			t.Fatal(err)
		}
		// A later outcome never overwrites "replayed" (a second runner of
		// the same redrive finding the item gone).
		for _, it := range []store.RedriveItem{{TaskID: "a", Outcome: "conflict"}, {TaskID: "a", Outcome: "unprocessable"},
			{TaskID: "b", Outcome: "not_open"}} {
			it.RedriveID, it.At = rec.ID, now
			if err := st.RecordRedriveItem(b.ctx, it, 1); err != nil {
				t.Fatal(err)
			}
		}
		got, err := st.GetRedrive(b.ctx, rec.ID)
		if err != nil || got.Cursor != "b" || got.Failed != 3 || got.Status != "running" || got.FilterKey != "k" {
			t.Fatalf("record: %+v %v", got, err)
		}
		counts, err := st.RedriveOutcomes(b.ctx, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "outcomes", counts, map[string]int{"unprocessable": 1, "not_open": 1})
		ok, err := st.SetRedriveStatus(b.ctx, rec.ID, []string{"running"}, "canceled", now)
		if err != nil || !ok {
			t.Fatalf("cancel: %v %v", ok, err)
		}
		ok, err = st.SetRedriveStatus(b.ctx, rec.ID, []string{"running"}, "canceled", now)
		if err != nil || ok {
			t.Fatalf("cancel twice: %v %v", ok, err)
		}
		if _, err := st.SetRedriveStatus(b.ctx, "nope", []string{"running"}, "canceled", now); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown: %v", err)
		}
		ok, err = st.SetRedriveStatus(b.ctx, rec.ID, []string{"canceled"}, "running", now)
		if got, _ := st.GetRedrive(b.ctx, rec.ID); err != nil || !ok || got.Status != "running" || got.FinishedAt != nil {
			t.Fatalf("reopen: %+v %v %v", got, ok, err)
		}
	})
}
