package storetest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
)

// testEnqueueBatch: a large batch (a store may write it differently from a
// single task: Postgres COPYs it) gives the results, the rows and the
// events that the same tasks enqueued one at a time give. The batch mixes
// every rule: tasks without keys (every option, scheduled, spilled
// payloads, ordering keys), new idempotency keys, keys of live tasks,
// keys repeated within the batch, and merge keys.
func (s *suite) testEnqueueBatch(t *testing.T) {
	t.Run("MatchesOneByOne", func(t *testing.T) {
		t.Parallel()
		const n = 1200 // more than one chunk of a thousand
		cfg := &backstop.Config{InlinePayloadLimit: 100, Queues: map[string]backstop.QueueConfig{}, Kinds: map[string]backstop.KindConfig{}}
		for _, side := range []string{"AAA", "BBB"} {
			cfg.Queues[side+"-ord"] = backstop.QueueConfig{Ordering: backstop.OrderingConfig{Enabled: true}}
			cfg.Kinds[side+"-merge"] = backstop.KindConfig{MergeRule: backstop.MergeAppend}
		}
		b := s.setup(t, cfg)
		b.clock.freeze()

		// Live tasks holding the keys the batch's duplicates name.
		for _, side := range []string{"AAA", "BBB"} {
			for k := range 5 {
				b.enqueue(backstop.EnqueueParams{ID: fmt.Sprintf("%s-old-%d", side, k), Queue: side + "-q", Kind: "k",
					IdempotencyKey: fmt.Sprintf("%s-old-key-%d", side, k), Payload: json.RawMessage(`{"old":true}`)})
			}
		}
		batch, err := b.c.EnqueueMany(b.ctx, batchParams("AAA", n, b.clock.Now()))
		if err != nil {
			t.Fatalf("batch: %v", err)
		}
		var single []backstop.EnqueueResult
		for _, p := range batchParams("BBB", n, b.clock.Now()) {
			r, err := b.c.Enqueue(b.ctx, p)
			if err != nil {
				t.Fatalf("one by one: %s: %v", p.ID, err)
			}
			single = append(single, *r)
		}
		if len(batch) != n || len(single) != n {
			t.Fatalf("%d and %d results for %d tasks", len(batch), len(single), n)
		}
		var dup, merged int
		for i := range n {
			got, want := batch[i], single[i]
			if got.Duplicate != want.Duplicate || got.Merged != want.Merged {
				t.Fatalf("task %d: batch duplicate=%v merged=%v, one by one duplicate=%v merged=%v",
					i, got.Duplicate, got.Merged, want.Duplicate, want.Merged)
			}
			if got.Duplicate {
				dup++
			}
			if got.Merged {
				merged++
			}
			sameJSON(t, fmt.Sprintf("task %d: result", i), got.Task, want.Task)
			sameJSON(t, fmt.Sprintf("task %d: stored", i), b.get(got.Task.ID), b.get(want.Task.ID))
			ge, err := b.c.Events(b.ctx, got.Task.ID)
			if err != nil {
				t.Fatal(err)
			}
			we, err := b.c.Events(b.ctx, want.Task.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, evs := range [][]backstop.Event{ge, we} {
				for j := range evs {
					evs[j].ID, evs[j].Seq, evs[j].Cursor = "", 0, "" // positions in the log
				}
			}
			sameJSON(t, fmt.Sprintf("task %d: events", i), ge, we)
		}
		if dup == 0 || merged == 0 {
			t.Fatalf("the batch had %d duplicates and %d merges: the test lost its mix", dup, merged)
		}
	})

	t.Run("TakenIDConflicts", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.enqueue(backstop.EnqueueParams{ID: "taken", Queue: "q", Kind: "k"})
		for _, at := range []int{0, 499, 999} {
			ps := plainParams("c"+itoa(at), 1000)
			ps[at].ID = "taken"
			if _, err := b.c.EnqueueMany(b.ctx, ps); err == nil || !strings.Contains(err.Error(), "taken") {
				t.Fatalf("a batch holding a taken id at %d: %v, want a conflict naming it", at, err)
			}
			ps = plainParams("d"+itoa(at), 1000)
			ps[at].ID = ps[(at+1)%1000].ID // the same id twice in the batch
			if _, err := b.c.EnqueueMany(b.ctx, ps); err == nil || !strings.Contains(err.Error(), ps[at].ID) {
				t.Fatalf("a batch holding an id twice: %v, want a conflict naming it", err)
			}
		}
		ts, err := b.c.List(b.ctx, backstop.ListParams{Queue: "q", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "tasks after the refused batches", len(ts), 1)
		// A batch without the taken id goes in whole after them.
		if _, err := b.c.EnqueueMany(b.ctx, plainParams("e", 1000)); err != nil {
			t.Fatal(err)
		}
	})
}

// batchParams is the mixed batch of testEnqueueBatch; side prefixes every
// id, key, queue and kind so that two batches share nothing but their shape.
func batchParams(side string, n int, now time.Time) []backstop.EnqueueParams {
	ps := make([]backstop.EnqueueParams, n)
	for i := range ps {
		p := backstop.EnqueueParams{ID: fmt.Sprintf("%s-%04d", side, i), Queue: side + "-q", Kind: "k",
			Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
		switch i % 12 {
		case 1:
			p.Priority, p.MaxAttempts, p.Timeout = i%7, 3, 1500*time.Millisecond
			p.Deadline = now.Add(time.Hour)
			p.Retry = &backstop.RetryPolicy{Schedule: []backstop.Duration{backstop.Duration(time.Second)}}
			p.Attributes = map[string]string{"tenant": fmt.Sprintf("t-%d", i%3), "n": itoa(i)}
			p.Progress = backstop.Progress{Total: 10, Completed: 4}
			p.Complexity = 2.5
			p.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		case 2:
			p.RunAt = now.Add(time.Duration(i) * time.Minute) // scheduled
		case 3:
			p.Payload = json.RawMessage(fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, strings.Repeat("x", 150))) // spilled
		case 4:
			p.IdempotencyKey = fmt.Sprintf("%s-new-key-%d", side, i)
		case 5:
			p.IdempotencyKey = fmt.Sprintf("%s-old-key-%d", side, i%5) // a live task's
		case 6:
			p.IdempotencyKey = fmt.Sprintf("%s-new-key-%d", side, i-2) // the batch's own, two tasks back
		case 7:
			p.Queue, p.OrderingKey, p.Sequence = side+"-ord", fmt.Sprintf("%s-o%d", side, i%3), int64(i)
		case 8:
			p.Kind, p.MergeKey = side+"-merge", fmt.Sprintf("%s-m%d", side, i%4)
		}
		ps[i] = p
	}
	return ps
}

// plainParams is n tasks without keys, ids prefixed.
func plainParams(prefix string, n int) []backstop.EnqueueParams {
	ps := make([]backstop.EnqueueParams, n)
	for i := range ps {
		ps[i] = backstop.EnqueueParams{ID: fmt.Sprintf("%s-%d", prefix, i), Queue: "q", Kind: "k"}
	}
	return ps
}

// sameJSON compares two values as JSON, with the batch's side prefix
// (AAA) written as the other's (BBB).
func sameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	g, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if gs := strings.ReplaceAll(string(g), "AAA", "BBB"); gs != string(w) {
		t.Fatalf("%s:\nbatch:      %s\none by one: %s", what, gs, w)
	}
}
