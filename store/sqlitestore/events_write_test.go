package sqlitestore

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// A row stores equal values once and differing ones as arrays (only from
// the first that differs); whatever the mix, every event reads back as
// written.
func TestEventRowColumns(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "rows.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	mk := func(i int, queue, kind, id string, at time.Time, attrs map[string]string) bt.Event {
		return bt.Event{ID: id, Time: at, Type: "test.row", Subject: fmt.Sprintf("s%d", i), Queue: queue, Kind: kind,
			Attributes: attrs, Body: json.RawMessage(fmt.Sprintf(`{"i":%d,"name":"é\"x"}`, i))}
	}
	cases := map[string][]bt.Event{
		"all equal": {mk(0, "q", "k", "", base, nil), mk(1, "q", "k", "", base, nil), mk(2, "q", "k", "", base, nil)},
		"one":       {mk(0, "q", "k", "id-0", base, map[string]string{"a": "b"})},
		"differ late": {mk(0, "q", "k", "", base, nil), mk(1, "q", "k", "", base, nil),
			mk(2, "q2", "k2", "id-2", base.Add(time.Second), map[string]string{"run_id": "r"}), mk(3, "q", "k", "", base, nil)},
		"differ first": {mk(0, "a", "b", "id-0", base.Add(time.Minute), map[string]string{"x": "1"}), mk(1, "q", "k", "", base, nil)},
	}
	for name, events := range cases {
		t.Run(name, func(t *testing.T) {
			before, err := s.ReadEvents(ctx, store.EventQuery{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			after := ""
			if n := len(before.Events); n > 0 {
				after = before.Events[n-1].Cursor
			}
			tx, err := s.w.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := insertEvents(ctx, tx, events); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			page, err := s.ReadEvents(ctx, store.EventQuery{After: after, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Events) != len(events) {
				t.Fatalf("read %d events, wrote %d", len(page.Events), len(events))
			}
			for i, got := range page.Events {
				want := events[i]
				if want.ID == "" {
					want.ID = got.Cursor
				}
				if got.Seq != page.Events[0].Seq {
					t.Fatalf("event %d in row %d, event 0 in row %d", i, got.Seq, page.Events[0].Seq)
				}
				if got.ID != want.ID || !got.Time.Equal(want.Time) || got.Subject != want.Subject || got.Queue != want.Queue ||
					got.Kind != want.Kind || !reflect.DeepEqual(got.Attributes, want.Attributes) ||
					string(got.Body) != string(want.Body) {
					t.Fatalf("event %d:\n got %+v\nwant %+v", i, got, want)
				}
			}
		})
	}
}
