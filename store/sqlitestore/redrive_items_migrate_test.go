package sqlitestore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

// Migration 00047 on a database holding a redrive's items written by the
// version before it: the index by outcome then holds the failed items
// only, and the items read as before (counts by outcome, the failed ones
// listed by outcome, the replayed ones too); rolled back, the index holds
// every item again.
func TestRedriveItemsOutcomeIndexMigration(t *testing.T) {
	ctx := context.Background()
	s, p := storeAt(t, 46)
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	rec, _, err := s.StartRedrive(ctx, store.Redrive{ID: "rd-old", Kind: store.JobRedrive, FilterKey: "k", Filter: []byte(`{}`),
		Snapshot: at, StartedAt: at})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range []store.RedriveItem{{TaskID: "a", Outcome: store.OutcomeReplayed}, {TaskID: "b", Outcome: store.OutcomeConflict},
		{TaskID: "c", Outcome: store.OutcomeReplayed}, {TaskID: "d", Outcome: store.OutcomeNotOpen}, {TaskID: "e", Outcome: store.OutcomeReplayed}} {
		it.RedriveID, it.At = rec.ID, at
		if err := s.RecordRedriveItem(ctx, it, 0); err != nil {
			t.Fatal(err)
		}
	}
	indexSQL := func() string {
		t.Helper()
		var def string
		if err := s.w.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE name = 'backstop_redrive_items_outcome'`).Scan(&def); err != nil {
			t.Fatal(err)
		}
		return def
	}
	if strings.Contains(indexSQL(), "WHERE") {
		t.Fatalf("before 00047 the index is partial: %s", indexSQL())
	}

	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if def := indexSQL(); !strings.Contains(def, "WHERE outcome <> 'replayed'") {
		t.Errorf("after 00047 the index by outcome is %s; want it to hold the failed items only", def)
	}
	counts, err := s.RedriveOutcomes(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != 3 || counts[store.OutcomeReplayed] != 3 || counts[store.OutcomeConflict] != 1 || counts[store.OutcomeNotOpen] != 1 {
		t.Errorf("outcomes %v; want 3 replayed, 1 conflict, 1 not_open", counts)
	}
	list := func(outcomes ...string) string {
		t.Helper()
		items, err := s.RedriveItems(ctx, store.RedriveItemsQuery{RedriveID: rec.ID, Outcomes: outcomes, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, it := range items {
			ids = append(ids, it.TaskID+"="+it.Outcome)
		}
		return strings.Join(ids, " ")
	}
	for _, c := range []struct {
		outcomes []string
		want     string
	}{
		{[]string{store.OutcomeConflict, store.OutcomeNotOpen, store.OutcomeUnprocessable}, "b=conflict d=not_open"},
		{[]string{store.OutcomeReplayed}, "a=replayed c=replayed e=replayed"},
		{[]string{store.OutcomeReplayed, store.OutcomeNotOpen}, "a=replayed c=replayed d=not_open e=replayed"},
		{nil, "a=replayed b=conflict c=replayed d=not_open e=replayed"},
	} {
		if got := list(c.outcomes...); got != c.want {
			t.Errorf("items of %v: %s; want %s", c.outcomes, got, c.want)
		}
	}
	if _, err := p.DownTo(ctx, 46); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(indexSQL(), "WHERE") {
		t.Errorf("rolled back, the index is still partial: %s", indexSQL())
	}
}
