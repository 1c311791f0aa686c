package sqlitestore

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// SettleClaim settles a batch and claims the next tasks in one write
// transaction: the successes apply only where their lease is current, the
// claim leases in claim order, the events of both are written with them
// (seqs without a gap) and the kept counts move; when the claim fails, the
// settle is rolled back with it.
func TestSettleClaimOneTransaction(t *testing.T) {
	ctx := t.Context()
	s, _ := storeAt(t, 1<<40) // every migration
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var tasks []*bt.Task
	for i := range 6 {
		tasks = append(tasks, &bt.Task{ID: fmt.Sprintf("sc-%d", i), Queue: "sc", Kind: "k", State: bt.StatePending,
			MaxAttempts: 3, Payload: json.RawMessage(`{}`), RunAt: t0, CreatedAt: t0, UpdatedAt: t0})
	}
	if _, err := s.Enqueue(ctx, tasks, store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	first, err := s.Claim(ctx, store.ClaimParams{Queue: "sc", WorkerID: "w1", Max: 3, Now: t0, Lease: time.Minute})
	if err != nil || len(first) != 3 {
		t.Fatalf("claim: %d tasks, %v", len(first), err)
	}
	done := t0.Add(time.Second)
	var ss []store.Settlement
	for _, c := range first {
		ss = append(ss, store.Settlement{TaskID: c.ID, ExecutionID: c.ExecutionID, State: bt.StateSucceeded,
			Outcome: bt.OutcomeSucceeded, FinishedAt: done})
	}
	stale := store.Settlement{TaskID: first[0].ID, ExecutionID: "not-the-lease", State: bt.StateSucceeded,
		Outcome: bt.OutcomeSucceeded, FinishedAt: done}
	next := store.ClaimParams{Queue: "sc", WorkerID: "w1", Max: 2, Now: done, Lease: time.Minute}

	// A claim that fails takes the settle with it.
	if _, err := s.w.ExecContext(ctx, `CREATE TRIGGER sc_refuse BEFORE UPDATE OF state ON backstop_tasks
		WHEN NEW.state = 'running' BEGIN SELECT RAISE(ABORT, 'claim refused'); END`); err != nil {
		t.Fatal(err)
	}
	if oks, got, err := s.SettleClaim(ctx, ss, next); err == nil {
		t.Fatalf("SettleClaim with a failing claim: %v %d tasks, want an error", oks, len(got))
	}
	for _, c := range first {
		if g, err := s.Get(ctx, c.ID); err != nil || g.State != bt.StateRunning {
			t.Fatalf("%s after the failed SettleClaim: %v %v, want running", c.ID, g.State, err)
		}
	}
	if _, err := s.w.ExecContext(ctx, `DROP TRIGGER sc_refuse`); err != nil {
		t.Fatal(err)
	}

	var before int64
	if err := s.w.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM backstop_events`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	oks, got, err := s.SettleClaim(ctx, append(slices.Clone(ss[1:]), stale, ss[0]), next)
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, true, false, true}; !slices.Equal(oks, want) {
		t.Fatalf("applied %v, want %v", oks, want)
	}
	if len(got) != 2 || got[0].ID != "sc-3" || got[1].ID != "sc-4" {
		t.Fatalf("claimed %+v, want sc-3 and sc-4", got)
	}
	for _, c := range got {
		if c.State != bt.StateRunning || c.Attempt != 1 || c.WorkerID != "w1" || c.ExecutionID == "" {
			t.Fatalf("claimed %+v", c)
		}
	}
	want := map[string]bt.State{"sc-0": bt.StateSucceeded, "sc-1": bt.StateSucceeded, "sc-2": bt.StateSucceeded,
		"sc-3": bt.StateRunning, "sc-4": bt.StateRunning, "sc-5": bt.StatePending}
	for id, st := range want {
		if g, err := s.Get(ctx, id); err != nil || g.State != st {
			t.Fatalf("%s: %v %v, want %s", id, g.State, err, st)
		}
	}
	// The settle's task.started and task.succeeded rows, then the claim's
	// task.claimed row, right after the events before them.
	rows, err := s.w.QueryContext(ctx, `SELECT seq, type, json_array_length(subjects) FROM backstop_events WHERE seq > ? ORDER BY seq`, before)
	if err != nil {
		t.Fatal(err)
	}
	var evs []string
	wantSeq := before + 1
	for rows.Next() {
		var (
			seq  int64
			typ  string
			subj int
		)
		if err := rows.Scan(&seq, &typ, &subj); err != nil {
			t.Fatal(err)
		}
		if seq != wantSeq {
			t.Fatalf("event seq %d after %d: a gap", seq, wantSeq-1)
		}
		wantSeq++
		evs = append(evs, fmt.Sprintf("%s:%d", typ, subj))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if w := []string{"task.started:3", "task.succeeded:3", "task.claimed:2"}; !slices.Equal(evs, w) {
		t.Fatalf("events %v, want %v", evs, w)
	}
	kept, err := s.CountByQueue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if scanned := scanCounts(t, s); fmt.Sprint(kept) != fmt.Sprint(scanned) {
		t.Fatalf("kept counts %+v, scanned %+v", kept, scanned)
	}

	// Nothing to settle, nothing to claim: both halves are optional.
	if oks, got, err := s.SettleClaim(ctx, nil, store.ClaimParams{Queue: "sc", WorkerID: "w1", Max: 5, Now: done, Lease: time.Minute}); err != nil || len(oks) != 0 || len(got) != 1 || got[0].ID != "sc-5" {
		t.Fatalf("claim only: %v %+v %v", oks, got, err)
	}
	if oks, got, err := s.SettleClaim(ctx, []store.Settlement{{TaskID: "sc-5", ExecutionID: "x", State: bt.StateSucceeded,
		Outcome: bt.OutcomeSucceeded, FinishedAt: done}}, store.ClaimParams{Queue: "sc", Max: 0}); err != nil || !slices.Equal(oks, []bool{false}) || len(got) != 0 {
		t.Fatalf("settle only: %v %+v %v", oks, got, err)
	}
}
