package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// testEventStreamsCrossXid: paging any stream by its Next serves every
// event of the stream once, none twice, when the transaction ids in the
// cursors gain a digit (issue 13: Postgres ordered a filtered read's window
// end by the transaction id as text, so a window holding "999-…" and
// "1001-…" ended at 999 and the next read served the 1001s again).
func (s *suite) testEventStreamsCrossXid(t *testing.T) {
	b := s.setup(t, nil)
	n := 0
	enqueue := func(k int) {
		for range k {
			b.enqueue(backstop.EnqueueParams{ID: fmt.Sprintf("x%03d", n), Queue: "xq", Kind: "k",
				Attributes: map[string]string{"run_id": "xr"}})
			n++
		}
	}
	work := func(k int) { // one transaction per claim and per settlement
		for range k {
			for _, task := range claim(t, b, "xq", 1) {
				settle(t, b, store.Settlement{TaskID: task.ID, ExecutionID: task.ExecutionID, Outcome: backstop.OutcomeSucceeded,
					FinishedAt: b.clock.Now(), State: backstop.StateSucceeded})
			}
		}
	}
	enqueue(6)
	work(2)
	if s.burnXid != nil {
		if err := s.burnXid(b.ctx, b.store); errors.Is(err, ErrXidTooFar) {
			t.Skipf("burn transaction ids: %v", err)
		} else if err != nil {
			t.Fatalf("burn transaction ids: %v", err)
		}
	}
	enqueue(6)
	work(6)

	var all []bt.Event
	want := 12 + 8*3 // task.enqueued each; task.claimed, task.started, task.succeeded each worked
	testwait.For(t, fmt.Sprintf("%d final events", want), func() bool {
		p, err := b.store.ReadEvents(b.ctx, store.EventQuery{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		all = p.Events
		return len(all) >= want
	})
	eq(t, "events", len(all), want)
	if s.burnXid != nil {
		first, _ := store.ParseCursor(all[0].Cursor)
		last, _ := store.ParseCursor(all[len(all)-1].Cursor)
		if len(fmt.Sprint(first.Xid)) == len(fmt.Sprint(last.Xid)) {
			t.Fatalf("transaction ids did not gain a digit: %s … %s", all[0].Cursor, all[len(all)-1].Cursor)
		}
		t.Logf("cursors from %s to %s", all[0].Cursor, all[len(all)-1].Cursor)
	}
	checkStreamsPaging(t, b, all, []string{"type.task.enqueued", "type.task.succeeded", "queue.xq", "run.xr", "worker.w-test",
		"task.x007", "all"})
}

// checkStreamsPaging pages each stream by Next at several page sizes and
// checks it serves exactly the events of all that belong to it, in order,
// each once.
func checkStreamsPaging(t *testing.T, b *bundle, all []bt.Event, streams []string) {
	t.Helper()
	for _, name := range streams {
		st, err := store.ParseStream(name)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, e := range all {
			if inStream(t, st, e, all) {
				want = append(want, e.Cursor)
			}
		}
		if len(want) == 0 {
			t.Fatalf("%s: no events to page", name)
		}
		for _, limit := range []int{1000, 3, 1} {
			var got []string
			seen := map[string]bool{}
			after := ""
			for pages := 0; ; pages++ {
				if pages > 4*len(all)+10 {
					t.Fatalf("%s (limit %d): paging does not end: %d events served, %d distinct", name, limit, len(got), len(seen))
				}
				p, err := b.store.ReadEvents(b.ctx, store.EventQuery{Stream: st, After: after, Limit: limit})
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range p.Events {
					if seen[e.Cursor] {
						t.Fatalf("%s (limit %d): event %s served twice (page after %q)", name, limit, e.Cursor, after)
					}
					seen[e.Cursor] = true
					got = append(got, e.Cursor)
				}
				if len(p.Events) == 0 && p.Next == after {
					break
				}
				if p.Next == after {
					t.Fatalf("%s (limit %d): a page of %d events did not move Next from %q", name, limit, len(p.Events), after)
				}
				after = p.Next
			}
			eq(t, fmt.Sprintf("%s (limit %d)", name, limit), got, want)
		}
	}
}

// inStream says whether an event belongs to a stream, as docs/events.md
// defines the streams (Go's reading, held against the drivers').
func inStream(t *testing.T, st store.Stream, e bt.Event, all []bt.Event) bool {
	t.Helper()
	type fields struct {
		WorkerID    any `json:"worker_id"`
		ExecutionID any `json:"execution_id"`
		Host        any `json:"host"`
	}
	read := func(e bt.Event) fields {
		var f fields
		if err := json.Unmarshal(e.Body, &f); err != nil {
			t.Fatalf("event %s: body: %v", e.Cursor, err)
		}
		return f
	}
	body := read(e)
	if st.Kind == store.StreamNode {
		if isWorkerEvent(e) {
			return body.Host == st.Value
		}
		if body.ExecutionID == nil || body.ExecutionID == "" {
			return false
		}
		// The attempt's worker is in its task.claimed; the worker's host
		// in its worker.started.
		var worker any
		for _, c := range all {
			if f := read(c); c.Type == "task.claimed" && f.ExecutionID == body.ExecutionID {
				worker = f.WorkerID
			}
		}
		for _, w := range all {
			if f := read(w); w.Type == "worker.started" && w.Subject == worker && f.Host == st.Value {
				return true
			}
		}
		return false
	}
	switch st.Kind {
	case store.StreamAll:
		return true
	case store.StreamType:
		return e.Type == st.Value
	case store.StreamTask:
		return e.Subject == st.Value && !isWorkerEvent(e)
	case store.StreamQueue:
		return e.Queue == st.Value
	case store.StreamRun:
		return e.Attributes["run_id"] == st.Value
	case store.StreamWorker:
		return e.Subject == st.Value || body.WorkerID == st.Value
	case store.StreamExecution:
		return body.ExecutionID == st.Value
	}
	t.Fatalf("no Go reading of stream %s", st)
	return false
}

func isWorkerEvent(e bt.Event) bool { return len(e.Type) > 7 && e.Type[:7] == "worker." }
