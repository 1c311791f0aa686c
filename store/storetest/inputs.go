package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
)

// wantInvalid fails unless err is a validation error on field.
func wantInvalid(t *testing.T, what string, err error, field string) {
	t.Helper()
	var ve *backstop.ValidationError
	if !errors.Is(err, backstop.ErrInvalid) || !errors.As(err, &ve) || ve.Field != field {
		t.Errorf("%s: got %v, want a validation error (ErrInvalid) on %s", what, err, field)
	}
}

// testInputs: input the library must refuse with ErrInvalid naming the
// field, writing nothing (issue 13, items 4 and 5).
func (s *suite) testInputs(t *testing.T) {
	bad := json.RawMessage("{\"a\":\"\xff\xfe\"}") // valid to encoding/json, not UTF-8

	t.Run("InvalidUTF8Refused", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		_, err := b.c.Enqueue(b.ctx, backstop.EnqueueParams{Queue: "q", Kind: "k", Payload: bad})
		wantInvalid(t, "payload", err, "payload")
		for _, c := range []struct {
			field string
			p     backstop.EnqueueParams
		}{
			{"idempotency_key", backstop.EnqueueParams{Queue: "q", Kind: "k", IdempotencyKey: "k\xff"}},
			{"merge_key", backstop.EnqueueParams{Queue: "q", Kind: "k", MergeKey: "m\xc3"}},
			{"trace_parent", backstop.EnqueueParams{Queue: "q", Kind: "k", TraceParent: "\xfe"}},
			{"attributes", backstop.EnqueueParams{Queue: "q", Kind: "k", Attributes: map[string]string{"a": "\xff"}}},
			// NUL: Postgres text and jsonb cannot hold it (SQLite can).
			{"attributes", backstop.EnqueueParams{Queue: "q", Kind: "k", Attributes: map[string]string{"a": "x\x00"}}},
			{"idempotency_key", backstop.EnqueueParams{Queue: "q", Kind: "k", IdempotencyKey: "k\x00"}},
			{"ordering_key", backstop.EnqueueParams{Queue: "q", Kind: "k", OrderingKey: "o\x00"}},
		} {
			_, err := b.c.Enqueue(b.ctx, c.p)
			wantInvalid(t, c.field, err, c.field)
		}
		_, err = b.c.EnqueueMany(b.ctx, []backstop.EnqueueParams{{Queue: "q", Kind: "k"}, {Queue: "q", Kind: "k", Payload: bad}})
		var be *backstop.BatchError
		if !errors.As(err, &be) || be.Index != 1 {
			t.Errorf("batch: got %v, want a BatchError at index 1", err)
		}
		wantInvalid(t, "batch", err, "payload")
		for _, tx := range s.beginTx {
			h, _, rollback, err := tx.begin(b.ctx, b.store)
			if err != nil {
				t.Fatal(err)
			}
			_, err = b.c.EnqueueTx(b.ctx, h, backstop.EnqueueParams{Queue: "q", Kind: "k", Payload: bad})
			wantInvalid(t, "transactional ("+tx.name+")", err, "payload")
			if err := rollback(); err != nil {
				t.Fatal(err)
			}
		}
		eq(t, "tasks written", b.count(), 0)

		// Replay and redrive patches: a value, a path or a merge patch
		// with invalid UTF-8 is refused and the dead letter is unchanged.
		d := b.dead(backstop.EnqueueParams{ID: "d1", Queue: "q", Kind: "k", Payload: json.RawMessage(`{"a":1}`)})
		for _, c := range []struct {
			name  string
			p     backstop.ReplayParams
			field string
		}{
			{"patch value", backstop.ReplayParams{ID: d.ID, Patch: []backstop.PatchOp{{Path: "a", Value: json.RawMessage("\"\xff\"")}}}, "patch"},
			{"patch path", backstop.ReplayParams{ID: d.ID, Patch: []backstop.PatchOp{{Path: "\xff", Value: json.RawMessage(`1`)}}}, "patch"},
			{"merge patch", backstop.ReplayParams{ID: d.ID, MergePatch: bad}, "merge_patch"},
		} {
			_, err := b.c.Replay(b.ctx, c.p)
			wantInvalid(t, "replay "+c.name, err, c.field)
			_, err = b.c.Redrive(b.ctx, backstop.RedriveParams{Filter: backstop.ListParams{Queue: "q"},
				Patch: c.p.Patch, MergePatch: c.p.MergePatch}, nil)
			wantInvalid(t, "redrive "+c.name, err, c.field)
		}
		_, err = backstop.ParsePatch("a=\xff")
		wantInvalid(t, "ParsePatch", err, "patch")
		// Free text that reaches the store and the history.
		_, err = b.c.Discard(b.ctx, backstop.DiscardParams{ID: d.ID, Reason: "bad\xff"})
		wantInvalid(t, "discard reason", err, "reason")
		_, err = b.c.Resolve(b.ctx, backstop.ResolveParams{ID: d.ID, Note: "n\x00"})
		wantInvalid(t, "resolve note", err, "note")
		_, err = b.c.Discard(b.ctx, backstop.DiscardParams{ID: d.ID, Reason: "r", Actor: "\xfe"})
		wantInvalid(t, "discard actor", err, "actor")
		_, err = b.c.Replay(b.ctx, backstop.ReplayParams{ID: d.ID, Actor: "a\x00"})
		wantInvalid(t, "replay actor", err, "actor")
		_, _, err = b.c.PauseQueue(b.ctx, "q", "\xff")
		wantInvalid(t, "pause actor", err, "actor")
		_, err = b.c.DeadLetters(b.ctx, backstop.ListParams{ErrorContains: "boom\x00"})
		wantInvalid(t, "error_contains", err, "error_contains")
		_, err = b.c.List(b.ctx, backstop.ListParams{Attrs: map[string]string{"a": "\xff"}})
		wantInvalid(t, "attr filter", err, "attr")
		_, err = b.c.List(b.ctx, backstop.ListParams{Queue: "q\x00"})
		wantInvalid(t, "queue filter", err, "queue")
		_, err = b.c.DeadLetters(b.ctx, backstop.ListParams{Kind: "\xff"})
		wantInvalid(t, "kind filter", err, "kind")
		got := b.get(d.ID)
		eq(t, "dead letter state", got.State, backstop.StateDead)
		eq(t, "dead letter payload", string(got.Payload), `{"a":1}`)
	})

	// An error text is a result, not input: a handler's error with a NUL or
	// invalid UTF-8 is recorded (made valid), never lost because Postgres
	// cannot store it.
	t.Run("ErrorTextIsRecorded", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.enqueue(backstop.EnqueueParams{ID: "e1", Queue: "default", Kind: "k", MaxAttempts: 1})
		b.worker(nil, map[string]backstop.Handler{"k": backstop.HandlerFunc(func(context.Context, *backstop.Task) error {
			return errors.New("bad \x00 bytes \xff here")
		})})
		got := b.waitState("e1", backstop.StateDead)
		eq(t, "last error", got.LastError, "bad \ufffd bytes \ufffd here")
	})

	t.Run("MergeFunctionOutputChecked", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, &backstop.Config{Kinds: map[string]backstop.KindConfig{
			"raw": {Merge: func(existing json.RawMessage, _ int, incoming json.RawMessage) (json.RawMessage, error) {
				return bad, nil // a careless merge function
			}},
		}})
		first := b.enqueue(backstop.EnqueueParams{Queue: "q", Kind: "raw", MergeKey: "m", Payload: json.RawMessage(`{"n":1}`)})
		_, err := b.c.Enqueue(b.ctx, backstop.EnqueueParams{Queue: "q", Kind: "raw", MergeKey: "m", Payload: json.RawMessage(`{"n":2}`)})
		if !errors.Is(err, backstop.ErrInvalid) {
			t.Errorf("merge function returning invalid UTF-8: got %v, want ErrInvalid", err)
		}
		eq(t, "payload after the refused merge", string(b.get(first.ID).Payload), `{"n":1}`)
	})

	t.Run("PolicyAndTimeGapsRefused", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		year1 := time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC)
		for _, c := range []struct {
			name  string
			p     backstop.EnqueueParams
			field string
		}{
			{"schedule and base", backstop.EnqueueParams{Retry: &backstop.RetryPolicy{Schedule: []bt.Duration{bt.Duration(time.Second)}, Base: bt.Duration(time.Second)}}, "retry"},
			{"schedule and max", backstop.EnqueueParams{Retry: &backstop.RetryPolicy{Schedule: []bt.Duration{bt.Duration(time.Second)}, Max: bt.Duration(time.Hour)}}, "retry"},
			{"base above max", backstop.EnqueueParams{Retry: &backstop.RetryPolicy{Base: bt.Duration(time.Hour), Max: bt.Duration(time.Minute)}}, "retry"},
			{"base above the default max", backstop.EnqueueParams{Retry: &backstop.RetryPolicy{Base: bt.Duration(2 * time.Hour)}}, "retry"},
			{"factor NaN", backstop.EnqueueParams{Retry: &backstop.RetryPolicy{Factor: math.NaN()}}, "retry"},
			{"max_attempts 10^12", backstop.EnqueueParams{MaxAttempts: 1e12}, "max_attempts"},
			{"max_attempts above the limit", backstop.EnqueueParams{MaxAttempts: backstop.MaxAttemptsLimit + 1}, "max_attempts"},
			{"run_at in year 1", backstop.EnqueueParams{RunAt: year1}, "run_at"},
			{"run_at in year 10000", backstop.EnqueueParams{RunAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, "run_at"},
			{"deadline in year 10000", backstop.EnqueueParams{Deadline: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, "deadline"},
		} {
			c.p.Queue, c.p.Kind = "q", "k"
			_, err := b.c.Enqueue(b.ctx, c.p)
			wantInvalid(t, c.name, err, c.field)
		}
		eq(t, "tasks written", b.count(), 0)
		// The limit itself and a schedule alone are fine.
		b.enqueue(backstop.EnqueueParams{Queue: "q", Kind: "k", MaxAttempts: backstop.MaxAttemptsLimit,
			Retry: &backstop.RetryPolicy{Schedule: []bt.Duration{bt.Duration(time.Second)}}})

		d := b.dead(backstop.EnqueueParams{ID: "d1", Queue: "dq", Kind: "k"})
		_, err := b.c.Replay(b.ctx, backstop.ReplayParams{ID: d.ID, RunAt: year1})
		wantInvalid(t, "replay run_at in year 1", err, "run_at")
		eq(t, "dead letter state", b.get(d.ID).State, backstop.StateDead)

		for name, cfg := range map[string]*backstop.Config{
			"client max attempts": {MaxAttempts: 1e12},
			"queue max attempts":  {Queues: map[string]backstop.QueueConfig{"q": {MaxAttempts: 1e12}}},
			"kind max attempts":   {Kinds: map[string]backstop.KindConfig{"k": {MaxAttempts: 1e12}}},
			"queue retry":         {Queues: map[string]backstop.QueueConfig{"q": {Retry: &backstop.RetryPolicy{Base: bt.Duration(time.Hour), Max: bt.Duration(time.Second)}}}},
			"kind retry":          {Kinds: map[string]backstop.KindConfig{"k": {Retry: &backstop.RetryPolicy{Schedule: []bt.Duration{1}, Factor: 3}}}},
		} {
			if _, err := backstop.NewClient(b.store, cfg); err == nil {
				t.Errorf("NewClient with a bad %s: accepted", name)
			}
		}
	})

	t.Run("BadCursorRefused", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.enqueue(backstop.EnqueueParams{ID: "t1", Queue: "q", Kind: "k"})
		b.dead(backstop.EnqueueParams{ID: "d1", Queue: "dq", Kind: "k", Attributes: map[string]string{backstop.RunAttribute: "r1"}})
		for _, after := range []string{"\x00", "a\x00b", "has space", "\xff", string(make([]byte, 300))} {
			_, err := b.c.List(b.ctx, backstop.ListParams{AfterID: after})
			wantInvalid(t, "List after "+after, err, "after")
			_, err = b.c.DeadLetters(b.ctx, backstop.ListParams{AfterID: after})
			wantInvalid(t, "DeadLetters after "+after, err, "after")
			_, err = b.c.RunTasks(b.ctx, "r1", backstop.ListParams{AfterID: after})
			wantInvalid(t, "RunTasks after "+after, err, "after")
			_, err = b.c.ExportDLQ(b.ctx, backstop.ListParams{AfterID: after}, func(backstop.DeadLetterExport) error { return nil })
			wantInvalid(t, "ExportDLQ after "+after, err, "after")
		}
		for _, after := range []string{"\x00", "a\x01", "\xff", string(make([]byte, 300))} {
			_, err := b.c.Workers(b.ctx, backstop.WorkerListParams{AfterID: after})
			wantInvalid(t, "Workers after "+after, err, "after")
		}
		// An id-shaped cursor still pages by id order, even when no task
		// has that id (the task a page ended on may have been deleted).
		ts, err := b.c.List(b.ctx, backstop.ListParams{AfterID: "d0"})
		if err != nil || len(ts) != 2 {
			t.Fatalf("List after d0: %d tasks, %v; want d1 and t1", len(ts), err)
		}
	})
}
