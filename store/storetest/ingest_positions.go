package storetest

import (
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

// testIngestPositions: an ingester's report creates its group and topic's
// row, the next replaces it (a caught-up report clears the lag's date),
// and the rows are listed by group then topic.
func (s *suite) testIngestPositions(t *testing.T) {
	b := s.setup(t, nil)
	st := b.store
	if ps, err := st.ListIngestPositions(b.ctx); err != nil || len(ps) != 0 {
		t.Fatalf("no position yet: %v %v", ps, err)
	}
	t0 := b.clock.Now().Truncate(time.Millisecond)
	from := t0.Add(-time.Hour)
	save := func(p store.IngestPosition) {
		t.Helper()
		if err := st.SaveIngestPosition(b.ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	save(store.IngestPosition{Group: "g", Topic: "uptime", Queue: "results", Holder: "a", LagMessages: 40, LagFrom: &from,
		UpdatedAt: t0, LastError: "database down", LastErrorAt: &t0})
	save(store.IngestPosition{Group: "a", Topic: "orders.created", Queue: "orders", Holder: "b", UpdatedAt: t0})
	ps, err := st.ListIngestPositions(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Group != "a" || ps[1].Group != "g" {
		t.Fatalf("list: %+v", ps)
	}
	p := ps[1]
	if p.Topic != "uptime" || p.Queue != "results" || p.Holder != "a" || p.LagMessages != 40 || p.LagFrom == nil || !p.LagFrom.Equal(from) ||
		!p.UpdatedAt.Equal(t0) || p.LastError != "database down" || p.LastErrorAt == nil || !p.LastErrorAt.Equal(t0) {
		t.Fatalf("position: %+v", p)
	}
	save(store.IngestPosition{Group: "g", Topic: "uptime", Queue: "results", Holder: "c", UpdatedAt: t0.Add(time.Second)})
	ps, _ = st.ListIngestPositions(b.ctx)
	if p := ps[1]; p.Holder != "c" || p.LagMessages != 0 || p.LagFrom != nil || p.LastError != "" || p.LastErrorAt != nil || !p.UpdatedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("replaced position: %+v", p)
	}
}
