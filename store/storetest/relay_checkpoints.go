package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

// testRelayCheckpoints: a relay checkpoint's stream is created by its
// first save, moved by later ones (counts added, the last error kept until
// a publish succeeds), read back, and listed by name then stream.
func (s *suite) testRelayCheckpoints(t *testing.T) {
	b := s.setup(t, nil)
	st := b.store
	if _, err := st.RelayCheckpoint(b.ctx, "feed", "all"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("no checkpoint yet: %v, want ErrNotFound", err)
	}
	t0 := b.clock.Now().Truncate(time.Millisecond)
	save := func(u store.RelayCheckpointUpdate) {
		t.Helper()
		if err := st.SaveRelayCheckpoint(b.ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	save(store.RelayCheckpointUpdate{Name: "feed", Stream: "all", Sink: "bus", Cursor: "", Now: t0})
	save(store.RelayCheckpointUpdate{Name: "feed", Stream: "all", Sink: "bus", Cursor: "5", AddPublished: 5, AddDuplicates: 1, Now: t0.Add(time.Second)})
	save(store.RelayCheckpointUpdate{Name: "feed", Stream: "all", Sink: "bus", Cursor: "7", AddPublished: 2, Error: "nats: timeout", Now: t0.Add(2 * time.Second)})
	c, err := st.RelayCheckpoint(b.ctx, "feed", "all")
	if err != nil {
		t.Fatal(err)
	}
	if c.Cursor != "7" || c.Sink != "bus" || c.Published != 7 || c.Duplicates != 1 || c.LastError != "nats: timeout" ||
		c.LastErrorAt == nil || !c.LastErrorAt.Equal(t0.Add(2*time.Second)) || !c.UpdatedAt.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("checkpoint after three saves: %+v", c)
	}
	// A failure with nothing published keeps the error; a publish clears it.
	save(store.RelayCheckpointUpdate{Name: "feed", Stream: "all", Sink: "bus", Cursor: "7", Now: t0.Add(3 * time.Second)})
	if c, _ = st.RelayCheckpoint(b.ctx, "feed", "all"); c.LastError == "" {
		t.Fatalf("a save without publishes cleared the error: %+v", c)
	}
	save(store.RelayCheckpointUpdate{Name: "feed", Stream: "all", Sink: "bus", Cursor: "9", AddPublished: 1, Now: t0.Add(4 * time.Second)})
	if c, _ = st.RelayCheckpoint(b.ctx, "feed", "all"); c.LastError != "" || c.LastErrorAt != nil || c.Published != 8 || c.Cursor != "9" {
		t.Fatalf("a publish did not clear the error: %+v", c)
	}
	// Create changes nothing of an existing row.
	save(store.RelayCheckpointUpdate{Name: "feed", Stream: "all", Sink: "other", Now: t0.Add(5 * time.Second), Create: true})
	if c, _ = st.RelayCheckpoint(b.ctx, "feed", "all"); c.Cursor != "9" || c.Sink != "bus" || c.Published != 8 {
		t.Fatalf("Create changed an existing checkpoint: %+v", c)
	}
	save(store.RelayCheckpointUpdate{Name: "feed", Stream: "queue.q", Sink: "bus", Now: t0, Create: true})
	save(store.RelayCheckpointUpdate{Name: "audit", Stream: "audit", Sink: "log", Now: t0})
	all, err := st.ListRelayCheckpoints(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range all {
		got = append(got, c.Name+"/"+c.Stream)
	}
	if len(got) != 3 || got[0] != "audit/audit" || got[1] != "feed/all" || got[2] != "feed/queue.q" {
		t.Fatalf("list: %v", got)
	}
}
