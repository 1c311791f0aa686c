package pgstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// checkExecIDs: the execution ids of one claim are uuids, distinct, and
// share one random prefix of 24 characters, which is not prev's.
func checkExecIDs(t *testing.T, got []*bt.Task, prev string) string {
	t.Helper()
	if len(got) < 2 {
		t.Fatalf("claimed %d tasks, want 2 or more", len(got))
	}
	seen := map[string]bool{}
	prefix := got[0].ExecutionID[:24]
	for _, tk := range got {
		if _, err := uuid.Parse(tk.ExecutionID); err != nil || seen[tk.ExecutionID] {
			t.Fatalf("execution id %q: %v (seen before: %v)", tk.ExecutionID, err, seen[tk.ExecutionID])
		}
		seen[tk.ExecutionID] = true
		if tk.ExecutionID[:24] != prefix {
			t.Fatalf("execution ids %q and %q of one claim: want one prefix per claim", got[0].ExecutionID, tk.ExecutionID)
		}
	}
	if prefix == prev {
		t.Fatalf("two claims with the prefix %q", prefix)
	}
	return prefix
}

// A claim's execution ids are one random prefix per claim and a number
// of the execution id sequence each (migration 00061): uuids still,
// distinct, and settled like any other. The migration on a database
// holding tasks claimed with random ids: those settle after it, and down
// and up again the claim works on both schemas.
func TestClaimExecutionIDsFromSequence(t *testing.T) {
	s := storeAt(t, 60)
	var tasks []*bt.Task
	for i := range 20 {
		tk := newTask("ex")
		tk.ID = fmt.Sprintf("ex-%02d", i)
		tasks = append(tasks, tk)
	}
	enqueue(t, s, store.EnqueueOpts{}, tasks...)
	before := claim(t, s, "ex", 3, t0.Add(time.Minute))
	if err := s.MigrateTo(t.Context(), 61); err != nil {
		t.Fatal(err)
	}
	a := claim(t, s, "ex", 4, t0.Add(time.Minute))
	p := checkExecIDs(t, a, "")
	b := claim(t, s, "ex", 4, t0.Add(time.Minute))
	checkExecIDs(t, b, p)
	if applied := settle(t, s, succeeded(append(append(before, a...), b...)...)...); len(applied) != 11 {
		t.Fatalf("settled %v", applied)
	}
	for _, tk := range append(before, a...) {
		if got := get(t, s, tk.ID); got.State != bt.StateSucceeded || got.ExecutionID != tk.ExecutionID {
			t.Fatalf("task %s: %s %s, want succeeded under %s", tk.ID, got.State, got.ExecutionID, tk.ExecutionID)
		}
	}
	if err := s.MigrateDownTo(t.Context(), 60); err != nil {
		t.Fatal(err)
	}
	settle(t, s, succeeded(claim(t, s, "ex", 3, t0.Add(time.Minute))...)...)
	if err := s.MigrateTo(t.Context(), 61); err != nil {
		t.Fatal(err)
	}
	checkExecIDs(t, claim(t, s, "ex", 3, t0.Add(time.Minute)), p)
	checkCounts(t, s, "claimed and settled across 00061")
}
