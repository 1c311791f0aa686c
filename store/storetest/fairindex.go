package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// FairIndex checks a driver's fair index: making a queue fair makes one
// index naming the queue and the attribute (indexes lists the definitions
// of the store's fair indexes), changing the attribute replaces it,
// turning fairness off drops it; fair claims rotate across the values
// with it and, once drop has dropped it behind the store's back, without
// it (the claims count the queue instead), and that EnsureFairIndexes
// (backstop migrate) makes it again.
func FairIndex(t *testing.T, s store.Store, indexes func() []string, drop func()) {
	t.Helper()
	ctx := t.Context()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	setFair := func(by string) {
		t.Helper()
		if err := s.SetFair(ctx, store.FairQueue{Queue: "fq", By: by, CreatedAt: t0}, bt.Event{}); err != nil {
			t.Fatal(err)
		}
	}
	wantIndex := func(by string) {
		t.Helper()
		defs := indexes()
		if len(defs) != 1 || !strings.Contains(defs[0], "fq") || !strings.Contains(defs[0], by) {
			t.Fatalf("fair indexes %q, want one on queue fq by %s", defs, by)
		}
	}
	setFair("tenant")
	wantIndex("tenant")
	var tasks []*bt.Task
	for i := range 12 {
		tasks = append(tasks, &bt.Task{ID: fmt.Sprintf("fi-%02d", i), Queue: "fq", Kind: "k", State: bt.StatePending,
			MaxAttempts: 3, Payload: []byte(`{}`), RunAt: t0, CreatedAt: t0, UpdatedAt: t0,
			// a's six first, then b's and c's
			Attributes: map[string]string{"tenant": []string{"a", "a", "a", "a", "a", "a", "b", "b", "b", "c", "c", "c"}[i]}})
	}
	if _, err := s.Enqueue(ctx, tasks, store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	claim := func(at time.Time) map[string]int {
		t.Helper()
		got, err := s.Claim(ctx, store.ClaimParams{Queue: "fq", WorkerID: "w", Max: 3, Now: at, Lease: time.Minute, Fair: true})
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for _, task := range got {
			n[task.Attributes["tenant"]]++
		}
		return n
	}
	if got := claim(t0); fmt.Sprint(got) != "map[a:1 b:1 c:1]" {
		t.Fatalf("fair claim with the index: %v, want one of each tenant", got)
	}
	drop()
	if got := claim(t0.Add(2 * time.Minute)); fmt.Sprint(got) != "map[a:1 b:1 c:1]" {
		t.Fatalf("fair claim without the index: %v, want one of each tenant", got)
	}
	// backstop migrate (the schema's owner) makes a fair queue's missing
	// index.
	if err := s.(interface{ EnsureFairIndexes(context.Context) error }).EnsureFairIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	wantIndex("tenant")
	setFair("region")
	wantIndex("region")
	if removed, err := s.RemoveFair(ctx, "fq", bt.Event{}); err != nil || !removed {
		t.Fatalf("remove fair: %v %v", removed, err)
	}
	if defs := indexes(); len(defs) != 0 {
		t.Fatalf("fair indexes after fairness off: %q", defs)
	}
}
