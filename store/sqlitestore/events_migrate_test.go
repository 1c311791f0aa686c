package sqlitestore

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// Migration 00009 turns each existing event into a one-element row: the
// events stay readable (log, task stream, history), their ids stay, and a
// cursor handed out before (<seq>) still means "after that event".
func TestEventBatchesMigration(t *testing.T) {
	ctx := context.Background()
	s, _ := storeAt(t, 8)
	// The old layout: one row per event; the hot path's rows have no id.
	old := []struct{ id, typ, subject, attrs, body string }{
		{"0193aaaa-0000-7000-8000-000000000001", "task.enqueued", "t1", `{"run_id":"r1"}`, `{"merged":false}`},
		{"", "task.claimed", "t1", `{"run_id":"r1"}`, `{"worker_id":"w1","attempt":1}`},
		{"0193aaaa-0000-7000-8000-000000000003", "task.enqueued", "t2", "", `{"merged":false}`},
		{"", "task.started", "t1", `{"run_id":"r1"}`, `{"worker_id":"w1","attempt":1}`},
	}
	for i, e := range old {
		var attrs any
		if e.attrs != "" {
			attrs = e.attrs
		}
		if _, err := s.w.Exec(`INSERT INTO backstop_events (id, time, type, subject, queue, kind, attributes, actor, body)
			VALUES (?, ?, ?, ?, 'q', 'k', ?, '', ?)`, e.id, int64(1_000_000*(i+1)), e.typ, e.subject, attrs, e.body); err != nil {
			t.Fatal(err)
		}
	}
	// A deleted event: the sequence must not go back to it.
	if _, err := s.w.Exec(`INSERT INTO backstop_events (id, time, type, subject, body) VALUES ('', 9000000, 'task.claimed', 'gone', '{}')`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.Exec(`DELETE FROM backstop_events WHERE subject = 'gone'`); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	page, err := s.ReadEvents(ctx, store.EventQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != len(old) {
		t.Fatalf("read %d events after the migration, want %d", len(page.Events), len(old))
	}
	for i, e := range page.Events {
		want := old[i]
		if e.Seq != int64(i+1) || e.Type != want.typ || e.Subject != want.subject || e.Queue != "q" || e.Kind != "k" ||
			string(e.Body) != want.body || !e.Time.Equal(time.UnixMicro(int64(1_000_000*(i+1)))) {
			t.Fatalf("event %d: %+v, want %+v", i, e, want)
		}
		wantID := want.id
		if wantID == "" {
			wantID = store.Cursor{Seq: uint64(i + 1)}.String() // its old cursor, "<seq>"
		}
		if e.ID != wantID {
			t.Fatalf("event %d: id %q, want %q", i, e.ID, wantID)
		}
		if (want.attrs != "") != (e.Attributes["run_id"] == "r1") {
			t.Fatalf("event %d: attributes %v", i, e.Attributes)
		}
	}
	// Old cursors: <seq> is after that event.
	for seq := 1; seq <= len(old); seq++ {
		page, err := s.ReadEvents(ctx, store.EventQuery{After: store.Cursor{Seq: uint64(seq)}.String(), Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Events) != len(old)-seq || len(page.Events) > 0 && page.Events[0].Seq != int64(seq+1) {
			t.Fatalf("after old cursor %d: %d events", seq, len(page.Events))
		}
	}
	// A task's stream and history come through the subject table.
	page, err = s.ReadEvents(ctx, store.EventQuery{Stream: store.Stream{Kind: store.StreamTask, Value: "t1"}, After: "1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := types(page.Events); len(got) != 2 || got[0] != "task.claimed" || got[1] != "task.started" {
		t.Fatalf("task.t1 after 1: %v", got)
	}
	hist, err := s.Events(ctx, "t2")
	if err != nil || len(hist) != 1 || hist[0].Type != "task.enqueued" {
		t.Fatalf("history of t2: %v %v", types(hist), err)
	}

	// New rows continue the sequence above the deleted event, and an old
	// cursor reads on into them.
	now := time.Now().UTC()
	tasks := []*bt.Task{
		{ID: "n1", Queue: "q", Kind: "k", State: bt.StatePending, MaxAttempts: 3, Payload: json.RawMessage(`{}`), RunAt: now, CreatedAt: now, UpdatedAt: now},
		{ID: "n2", Queue: "q", Kind: "k", State: bt.StatePending, MaxAttempts: 3, Payload: json.RawMessage(`{}`), RunAt: now, CreatedAt: now, UpdatedAt: now},
	}
	if _, err := s.Enqueue(ctx, tasks, store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	page, err = s.ReadEvents(ctx, store.EventQuery{After: "4"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 2 || page.Events[0].Seq != 6 || page.Events[1].Seq != 6 ||
		page.Events[0].Cursor != "0-6-1" || page.Events[1].Cursor != "0-6-2" || page.Events[1].Subject != "n2" {
		t.Fatalf("after 4: %+v", page.Events)
	}
}

// The down migration keeps the one-event rows in the old layout.
func TestEventBatchesMigrationDown(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "down.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	one := []*bt.Task{{ID: "a", Queue: "q", Kind: "k", State: bt.StatePending, MaxAttempts: 3, Payload: json.RawMessage(`{}`),
		RunAt: now, CreatedAt: now, UpdatedAt: now, Attributes: map[string]string{"run_id": "r"}}}
	if _, err := s.Enqueue(ctx, one, store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	p, err := s.provider()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 8); err != nil {
		t.Fatal(err)
	}
	var subject, attrs, body string
	if err := s.w.QueryRow(`SELECT subject, attributes, body FROM backstop_events`).Scan(&subject, &attrs, &body); err != nil {
		t.Fatal(err)
	}
	if subject != "a" || attrs != `{"run_id":"r"}` || body == "" || body[0] != '{' {
		t.Fatalf("after down: %q %q %q", subject, attrs, body)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	hist, err := s.Events(ctx, "a")
	if err != nil || len(hist) != 1 || hist[0].Attributes["run_id"] != "r" {
		t.Fatalf("history after down and up: %+v %v", hist, err)
	}
}

func types(es []bt.Event) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, e.Type)
	}
	return out
}
