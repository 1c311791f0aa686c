package storetest

import (
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// testEventSharedRows: events written by one statement share a log row on
// both stores (docs/events.md, "Storage and cost"). A reader pages through
// such a row one event at a time (a cursor inside a row), and when
// retention deletes one of the tasks, the events of the others stay, with
// the same cursors, in every stream.
func (s *suite) testEventSharedRows(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	if _, err := b.c.EnqueueMany(b.ctx, []backstop.EnqueueParams{
		{ID: "keep", Queue: "rows", Kind: "k", Attributes: map[string]string{"run_id": "r-rows"}},
		{ID: "drop", Queue: "rows", Kind: "k", Attributes: map[string]string{"run_id": "r-rows"}},
		{ID: "keep2", Queue: "rows", Kind: "k"},
	}); err != nil {
		t.Fatal(err)
	}
	got := claim(t, b, "rows", 10)
	eq(t, "claimed", len(got), 3)
	var ss []store.Settlement
	for _, task := range got {
		if task.ID != "keep" {
			ss = append(ss, store.Settlement{TaskID: task.ID, ExecutionID: task.ExecutionID, Outcome: bt.OutcomeSucceeded,
				FinishedAt: b.clock.Now(), State: bt.StateSucceeded})
		}
	}
	eq(t, "settled", settle(t, b, ss...), []bool{true, true})

	read := func(stream store.Stream, after string, limit int) store.EventPage {
		t.Helper()
		p, err := b.store.ReadEvents(b.ctx, store.EventQuery{Stream: stream, After: after, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	all := store.Stream{Kind: store.StreamAll}
	const total = 3 + 3 + 2 + 2 // enqueued, claimed, then started and succeeded of two
	var whole store.EventPage
	testwait.For(t, "the final events", func() bool { whole = read(all, "", 100); return len(whole.Events) >= total })
	eq(t, "events", len(whole.Events), total)

	// One event at a time, the cursor moving inside rows.
	var oneByOne []store.Cursor
	after := ""
	for range total + 1 {
		p := read(all, after, 1)
		if len(p.Events) == 0 {
			eq(t, "next at the end", p.Next, after)
			break
		}
		eq(t, "one event", len(p.Events), 1)
		c, err := store.ParseCursor(p.Events[0].Cursor)
		if err != nil {
			t.Fatal(err)
		}
		oneByOne = append(oneByOne, c)
		after = p.Next
	}
	eq(t, "paged one by one", len(oneByOne), total)
	for i, e := range whole.Events {
		c, _ := store.ParseCursor(e.Cursor)
		eq(t, "cursor of event "+e.Cursor, oneByOne[i], c)
	}
	sharedRow := false
	for i := 1; i < len(oneByOne); i++ {
		sharedRow = sharedRow || oneByOne[i].Seq == oneByOne[i-1].Seq
	}
	eq(t, "a statement's events share a row", sharedRow, true)

	// Retention deletes "drop" (succeeded a day ago) and "keep2"; "keep"
	// still runs, and its events keep their places.
	cursors := map[string]string{}
	for _, e := range whole.Events {
		if e.Subject == "keep" {
			cursors[e.Type] = e.Cursor
		}
	}
	b.clock.Advance(48 * time.Hour)
	n, err := b.store.DeleteFinished(b.ctx, bt.StateSucceeded, b.clock.Now().Add(-24*time.Hour), 100)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "deleted tasks", n, 2)
	eq(t, "history of a deleted task", b.types("drop"), []string{})
	eq(t, "history of the kept task", b.types("keep"), []string{"task.enqueued", "task.claimed"})
	var left store.EventPage
	testwait.For(t, "the kept events", func() bool { left = read(all, "", 100); return len(left.Events) >= 2 })
	eq(t, "events left", len(left.Events), 2)
	for _, e := range left.Events {
		eq(t, "subject left", e.Subject, "keep")
		eq(t, "cursor of "+e.Type, e.Cursor, cursors[e.Type])
		eq(t, "attributes of "+e.Type, e.Attributes["run_id"], "r-rows")
	}
	for _, st := range []store.Stream{{Kind: store.StreamType, Value: "task.claimed"}, {Kind: store.StreamQueue, Value: "rows"},
		{Kind: store.StreamRun, Value: "r-rows"}, {Kind: store.StreamTask, Value: "keep"}} {
		p := read(st, "", 100)
		for _, e := range p.Events {
			eq(t, st.String()+" subject", e.Subject, "keep")
		}
	}
	eq(t, "run stream", len(read(store.Stream{Kind: store.StreamRun, Value: "r-rows"}, "", 100).Events), 2)
	eq(t, "task stream of a deleted task", len(read(store.Stream{Kind: store.StreamTask, Value: "drop"}, "", 100).Events), 0)

	// Event retention counts the events a row holds, not its blanks.
	b.clock.Advance(10 * 24 * time.Hour)
	deleted := 0
	for {
		n, err := b.store.DeleteEventsBefore(b.ctx, b.clock.Now().Add(-7*24*time.Hour), 1000)
		if err != nil {
			t.Fatal(err)
		}
		deleted += n
		if n < 1000 {
			break
		}
	}
	eq(t, "events deleted by retention", deleted, 2)
	eq(t, "log after retention", len(read(all, "", 100).Events), 0)
}
