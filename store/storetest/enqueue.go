package storetest

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
)

func (s *suite) testEnqueue(t *testing.T) {
	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		task := b.enqueue(backstop.EnqueueParams{Queue: "default", Kind: "k"})
		u, err := uuid.Parse(task.ID)
		if err != nil || u.Version() != 7 {
			t.Fatalf("default id %q is not a UUIDv7", task.ID)
		}
		got := b.get(task.ID)
		eq(t, "state", got.State, backstop.StatePending)
		eq(t, "max attempts", got.MaxAttempts, 25)
		eq(t, "payload", string(got.Payload), `{}`)
		eq(t, "attempt", got.Attempt, 0)
		eq(t, "executions", len(got.Executions), 0)
	})

	t.Run("EveryOption", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		now := b.clock.Now()
		deadline := now.Add(time.Hour)
		runAt := now.Add(10 * time.Minute)
		retry := &backstop.RetryPolicy{Schedule: []backstop.Duration{backstop.Duration(time.Second), backstop.Duration(2 * time.Second)}}
		p := backstop.EnqueueParams{
			ID: "order-42", Queue: "emails", Kind: "send_email",
			Payload: json.RawMessage(`{"to":"a@example.com","n":[1,2,3]}`), Priority: 7, RunAt: runAt,
			MaxAttempts: 3, Timeout: 1500 * time.Millisecond, Deadline: deadline, Retry: retry,
			Attributes:     map[string]string{"run_id": "r1", "plan_hash": "abc", "tenant": "t-9"},
			IdempotencyKey: "idem-1", MergeKey: "", Progress: backstop.Progress{Total: 10, Completed: 4},
			Complexity:  12.5,
			TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		}
		b.enqueue(p)
		got := b.get("order-42")
		eq(t, "queue", got.Queue, "emails")
		eq(t, "kind", got.Kind, "send_email")
		eq(t, "state", got.State, backstop.StateScheduled)
		eq(t, "payload", string(got.Payload), string(p.Payload))
		eq(t, "priority", got.Priority, 7)
		eq(t, "run_at", got.RunAt, runAt)
		eq(t, "max attempts", got.MaxAttempts, 3)
		eq(t, "timeout", time.Duration(got.Timeout), 1500*time.Millisecond)
		if got.Deadline == nil || !got.Deadline.Equal(deadline) {
			t.Fatalf("deadline: got %v want %v", got.Deadline, deadline)
		}
		eq(t, "retry", got.Retry.Schedule, retry.Schedule)
		eq(t, "attributes", got.Attributes, p.Attributes)
		eq(t, "idempotency key", got.IdempotencyKey, "idem-1")
		eq(t, "progress", got.Progress, p.Progress)
		eq(t, "complexity", got.Complexity, 12.5)
		eq(t, "trace parent", got.TraceParent, p.TraceParent)
		if got.CreatedAt.Before(now) || !got.UpdatedAt.Equal(got.CreatedAt) {
			t.Fatalf("created_at %v / updated_at %v: want both equal and not before %v", got.CreatedAt, got.UpdatedAt, now)
		}

		d := b.enqueue(backstop.EnqueueParams{Queue: "emails", Kind: "k", Delay: time.Minute})
		eq(t, "delayed state", b.get(d.ID).State, backstop.StateScheduled)
		eq(t, "delayed run_at", b.get(d.ID).RunAt.Sub(b.get(d.ID).CreatedAt), time.Minute)
	})

	t.Run("BadInputWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, &backstop.Config{MaxPayloadSize: 1024, StrictQueues: true,
			Queues: map[string]backstop.QueueConfig{"q": {}}})
		past := b.clock.Now().Add(-time.Minute)
		cases := []struct {
			name  string
			p     backstop.EnqueueParams
			field string
		}{
			{"no queue", backstop.EnqueueParams{Kind: "k"}, "queue"},
			{"unknown queue (strict)", backstop.EnqueueParams{Queue: "nope", Kind: "k"}, "queue"},
			{"no kind", backstop.EnqueueParams{Queue: "q"}, "kind"},
			{"bad kind", backstop.EnqueueParams{Queue: "q", Kind: "has space"}, "kind"},
			{"bad id", backstop.EnqueueParams{Queue: "q", Kind: "k", ID: "a/b c"}, "id"},
			{"payload not json", backstop.EnqueueParams{Queue: "q", Kind: "k", Payload: json.RawMessage(`{nope`)}, "payload"},
			{"payload too large", backstop.EnqueueParams{Queue: "q", Kind: "k", Payload: json.RawMessage(`"` + strings.Repeat("x", 2000) + `"`)}, "payload"},
			{"negative attempts", backstop.EnqueueParams{Queue: "q", Kind: "k", MaxAttempts: -1}, "max_attempts"},
			{"negative timeout", backstop.EnqueueParams{Queue: "q", Kind: "k", Timeout: -time.Second}, "timeout"},
			{"run_at and delay", backstop.EnqueueParams{Queue: "q", Kind: "k", Delay: time.Second, RunAt: time.Now()}, "run_at"},
			{"deadline in the past", backstop.EnqueueParams{Queue: "q", Kind: "k", Deadline: past}, "deadline"},
			{"bad attribute key", backstop.EnqueueParams{Queue: "q", Kind: "k", Attributes: map[string]string{"a b": "x"}}, "attributes"},
			{"bad progress", backstop.EnqueueParams{Queue: "q", Kind: "k", Progress: backstop.Progress{Total: 2, Completed: 3}}, "progress"},
			{"negative complexity", backstop.EnqueueParams{Queue: "q", Kind: "k", Complexity: -1}, "complexity"},
			{"bad retry", backstop.EnqueueParams{Queue: "q", Kind: "k", Retry: &backstop.RetryPolicy{Factor: 0.5}}, "retry"},
		}
		for _, tc := range cases {
			_, err := b.c.Enqueue(b.ctx, tc.p)
			var ve *backstop.ValidationError
			if !errors.Is(err, backstop.ErrInvalid) || !errors.As(err, &ve) || ve.Field != tc.field {
				t.Errorf("%s: got %v, want a validation error on %s", tc.name, err, tc.field)
			}
		}
		// A bad task in a batch refuses the whole batch.
		_, err := b.c.EnqueueMany(b.ctx, []backstop.EnqueueParams{{Queue: "q", Kind: "k"}, {Queue: "q", Kind: "k", MaxAttempts: -5}})
		var be *backstop.BatchError
		if !errors.As(err, &be) || be.Index != 1 {
			t.Fatalf("bad batch: got %v, want BatchError at index 1", err)
		}
		eq(t, "tasks written", b.count(), 0)
	})

	t.Run("DuplicateIDConflicts", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.enqueue(backstop.EnqueueParams{ID: "same", Queue: "q", Kind: "k"})
		_, err := b.c.Enqueue(b.ctx, backstop.EnqueueParams{ID: "same", Queue: "q", Kind: "k"})
		if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "same") {
			t.Fatalf("got %v, want conflict naming the id", err)
		}
		// All or nothing: the batch with one conflicting id writes nothing.
		_, err = b.c.EnqueueMany(b.ctx, []backstop.EnqueueParams{{ID: "fresh", Queue: "q", Kind: "k"}, {ID: "same", Queue: "q", Kind: "k"}})
		if !errors.Is(err, store.ErrConflict) {
			t.Fatalf("batch: got %v, want conflict", err)
		}
		if _, err := b.c.Get(b.ctx, "fresh"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("fresh was written despite the conflict: %v", err)
		}
	})

	t.Run("Idempotency", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		r1, err := b.c.Enqueue(b.ctx, backstop.EnqueueParams{Queue: "q", Kind: "k", IdempotencyKey: "once"})
		if err != nil {
			t.Fatal(err)
		}
		r2, err := b.c.Enqueue(b.ctx, backstop.EnqueueParams{Queue: "q", Kind: "k", IdempotencyKey: "once", Payload: json.RawMessage(`{"x":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "duplicate", r2.Duplicate, true)
		eq(t, "same task", r2.Task.ID, r1.Task.ID)
		eq(t, "count", b.count(), 1)
		// Within one batch too.
		rs, err := b.c.EnqueueMany(b.ctx, []backstop.EnqueueParams{{Queue: "q", Kind: "k", IdempotencyKey: "b"}, {Queue: "q", Kind: "k", IdempotencyKey: "b"}})
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "batch duplicate", rs[1].Duplicate, true)
		eq(t, "batch same id", rs[1].Task.ID, rs[0].Task.ID)
		// Once the first is finished, the key is free again.
		claimAndSucceed(t, b, "q", 10)
		r3, err := b.c.Enqueue(b.ctx, backstop.EnqueueParams{Queue: "q", Kind: "k", IdempotencyKey: "once"})
		if err != nil {
			t.Fatal(err)
		}
		if r3.Duplicate || r3.Task.ID == r1.Task.ID {
			t.Fatalf("after the first finished, a new task was expected")
		}
	})

	t.Run("MergeReplaceAndAppend", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, &backstop.Config{Kinds: map[string]backstop.KindConfig{"collect": {MergeRule: backstop.MergeAppend}}})
		r1, _ := b.c.Enqueue(b.ctx, backstop.EnqueueParams{Queue: "q", Kind: "recalc", MergeKey: "table-1", Payload: json.RawMessage(`{"v":1}`)})
		r2, err := b.c.Enqueue(b.ctx, backstop.EnqueueParams{Queue: "q", Kind: "recalc", MergeKey: "table-1", Payload: json.RawMessage(`{"v":2}`)})
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "merged", r2.Merged, true)
		eq(t, "merged into", r2.Task.ID, r1.Task.ID)
		got := b.get(r1.Task.ID)
		eq(t, "replace payload", string(got.Payload), `{"v":2}`)
		eq(t, "merge count", got.MergeCount, 1)

		a1, _ := b.c.Enqueue(b.ctx, backstop.EnqueueParams{Queue: "q", Kind: "collect", MergeKey: "m", Payload: json.RawMessage(`1`)})
		b.c.Enqueue(b.ctx, backstop.EnqueueParams{Queue: "q", Kind: "collect", MergeKey: "m", Payload: json.RawMessage(`2`)})
		r, _ := b.c.Enqueue(b.ctx, backstop.EnqueueParams{Queue: "q", Kind: "collect", MergeKey: "m", Payload: json.RawMessage(`3`)})
		eq(t, "append merged", r.Merged, true)
		var list []int
		if err := json.Unmarshal(b.get(a1.Task.ID).Payload, &list); err != nil {
			t.Fatal(err)
		}
		eq(t, "append payload", list, []int{1, 2, 3})
		// The same merge key under another kind is another task.
		o, _ := b.c.Enqueue(b.ctx, backstop.EnqueueParams{Queue: "q", Kind: "other", MergeKey: "m"})
		eq(t, "other kind merged", o.Merged, false)
		// Once claimed, the task no longer absorbs merges.
		claimAndSucceed(t, b, "q", 10)
		r4, _ := b.c.Enqueue(b.ctx, backstop.EnqueueParams{Queue: "q", Kind: "recalc", MergeKey: "table-1"})
		if r4.Merged || r4.Task.ID == r1.Task.ID {
			t.Fatal("merged into a task that was no longer waiting")
		}
	})

	t.Run("PayloadSpill", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, &backstop.Config{InlinePayloadLimit: 256})
		big := json.RawMessage(`{"blob":"` + strings.Repeat("z", 5000) + `"}`)
		task := b.enqueue(backstop.EnqueueParams{Queue: "q", Kind: "k", Payload: big, MaxAttempts: 3,
			Retry: &backstop.RetryPolicy{Schedule: []backstop.Duration{0}}})
		got := b.get(task.ID)
		eq(t, "spilled", got.PayloadSpilled, true)
		eq(t, "payload size", got.PayloadSize, len(big))
		eq(t, "payload via get", string(got.Payload), string(big))
		listed, err := b.c.List(b.ctx, backstop.ListParams{Queue: "q"})
		if err != nil || len(listed) != 1 {
			t.Fatalf("list: %v %d", err, len(listed))
		}
		eq(t, "payload via list", string(listed[0].Payload), string(big))
		// Claimed, failed, claimed again: the handler sees the whole payload each time.
		for attempt := 1; attempt <= 2; attempt++ {
			cl := claim(t, b, "q", 1)
			eq(t, "claimed payload", string(cl[0].Payload), string(big))
			settle(t, b, store.Settlement{TaskID: cl[0].ID, ExecutionID: cl[0].ExecutionID, Outcome: "transient_error",
				Error: "x", FinishedAt: b.clock.Now(), State: backstop.StatePending, RunAt: b.clock.Now()})
		}
		// Small payload: inline.
		small := b.enqueue(backstop.EnqueueParams{Queue: "q", Kind: "k", Payload: json.RawMessage(`{"a":1}`)})
		eq(t, "small spilled", b.get(small.ID).PayloadSpilled, false)
	})

	t.Run("Batch", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		params := make([]backstop.EnqueueParams, 2500)
		for i := range params {
			params[i] = backstop.EnqueueParams{Queue: "bulk", Kind: "k", Payload: json.RawMessage(`{"i":` + itoa(i) + `}`)}
		}
		rs, err := b.c.EnqueueMany(b.ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "results", len(rs), 2500)
		eq(t, "stored", b.count(), 2500)
	})

	t.Run("Transactional", func(t *testing.T) {
		if len(s.beginTx) == 0 {
			t.Skip("driver gave no transaction kinds")
		}
		for _, tx := range s.beginTx {
			t.Run(tx.name, func(t *testing.T) {
				b := s.setup(t, nil)
				h, commit, _, err := tx.begin(b.ctx, b.store)
				if err != nil {
					t.Fatal(err)
				}
				r, err := b.c.EnqueueTx(b.ctx, h, backstop.EnqueueParams{Queue: "q", Kind: "k", ID: "committed"})
				if err != nil {
					t.Fatal(err)
				}
				eq(t, "id", r[0].Task.ID, "committed")
				if err := commit(); err != nil {
					t.Fatal(err)
				}
				eq(t, "after commit", b.get("committed").State, backstop.StatePending)

				h, _, rollback, err := tx.begin(b.ctx, b.store)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := b.c.EnqueueTx(b.ctx, h, backstop.EnqueueParams{Queue: "q", Kind: "k", ID: "rolled-back"}); err != nil {
					t.Fatal(err)
				}
				if err := rollback(); err != nil {
					t.Fatal(err)
				}
				if _, err := b.c.Get(b.ctx, "rolled-back"); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("rolled back task exists: %v", err)
				}
			})
		}
	})
}

func itoa(i int) string { return strconv.Itoa(i) }
