package backstop

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
	"github.com/backstophq/backstop/store/sqlitestore"
	"github.com/backstophq/backstop/workflow"
)

// jsonbBad: documents PostgreSQL's jsonb cannot hold, with the path (under
// "payload") an error must name.
var jsonbBad = []struct{ name, doc, path string }{
	{"lone surrogate", `{"a":"\udc00"}`, ".a"},
	{"NUL", `{"a":"x\u0000"}`, ".a"},
	{"number out of range", `{"amount":1e200000}`, ".amount"},
}

// wantRefused fails unless err is a validation error on field whose
// message names path.
func wantRefused(t *testing.T, what string, err error, field, path string) {
	t.Helper()
	var ve *ValidationError
	if !errors.Is(err, ErrInvalid) || !errors.As(err, &ve) || ve.Field != field || !strings.Contains(ve.Message, path) {
		t.Errorf("%s: got %v, want a validation error on %s naming %s", what, err, field, path)
	}
}

// TestJSONBRefusedAtEveryEntry: on both stores, a payload, a merge, a
// transactional enqueue, a replay or redrive patch, a run's input and a
// step's or task's result that jsonb cannot hold is refused naming the
// field and the value's path, and nothing is written.
func TestJSONBRefusedAtEveryEntry(t *testing.T) {
	t.Parallel()
	cfg := func() *Config {
		return &Config{Kinds: map[string]KindConfig{
			"app": {MergeRule: MergeAppend},
			"rep": {MergeRule: MergeReplace},
			"fn": {Merge: func(json.RawMessage, int, json.RawMessage) (json.RawMessage, error) {
				return json.RawMessage(`{"n":[1,-1e131072]}`), nil
			}},
		}}
	}
	forEachStoreClient(t, cfg, func(t *testing.T, c *Client) {
		ctx := context.Background()
		count := func() int {
			t.Helper()
			ts, err := c.List(ctx, ListParams{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			return len(ts)
		}
		for _, k := range []string{"app", "rep", "fn"} {
			if _, err := c.Enqueue(ctx, EnqueueParams{ID: "m-" + k, Queue: "q", Kind: k, MergeKey: "m", Payload: json.RawMessage(`{"n":1}`)}); err != nil {
				t.Fatal(err)
			}
		}
		applyYAML(t, c, "name: wb\nqueue: wf\nsteps:\n  - {id: a, kind: setbad}\n  - {id: b, kind: ok, needs: [a]}\n")

		for _, b := range jsonbBad {
			doc := json.RawMessage(b.doc)
			_, err := c.Enqueue(ctx, EnqueueParams{Queue: "q", Kind: "k", Payload: doc})
			wantRefused(t, b.name+": enqueue", err, "payload", "payload"+b.path)
			wantRefused(t, b.name+": Validate", c.Validate(EnqueueParams{Queue: "q", Kind: "k", Payload: doc}), "payload", "payload"+b.path)
			_, err = c.EnqueueMany(ctx, []EnqueueParams{{Queue: "q", Kind: "k"}, {Queue: "q", Kind: "k", Payload: doc}})
			var be *BatchError
			if !errors.As(err, &be) || be.Index != 1 {
				t.Errorf("%s: batch: %v, want a BatchError at index 1", b.name, err)
			}
			wantRefused(t, b.name+": batch", err, "payload", "payload"+b.path)
			_, err = enqueueTx(ctx, c, EnqueueParams{Queue: "q", Kind: "k", Payload: doc})
			wantRefused(t, b.name+": EnqueueTx", err, "payload", "payload"+b.path)
			for _, k := range []string{"app", "rep"} {
				_, err = c.Enqueue(ctx, EnqueueParams{Queue: "q", Kind: k, MergeKey: "m", Payload: doc})
				wantRefused(t, b.name+": merge "+k, err, "payload", "payload"+b.path)
			}
			_, err = c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "wb", RunID: "bad-input", Input: doc})
			wantRefused(t, b.name+": run input", err, "input", "input"+b.path)
			_, err = CheckResult(doc)
			wantRefused(t, b.name+": CheckResult", err, "result", "result"+b.path)
		}
		_, err := c.Enqueue(ctx, EnqueueParams{Queue: "q", Kind: "fn", MergeKey: "m", Payload: json.RawMessage(`{"n":2}`)})
		wantRefused(t, "merge function", err, "payload", "payload.n[1]")
		// An append merge into a waiting payload stored before the rule
		// (written through the store) would carry it on: refused.
		now := c.now()
		old := &Task{ID: "m-old", Queue: "q", Kind: "app", State: StatePending, MaxAttempts: 3, MergeKey: "old",
			Payload: json.RawMessage(`{"a":"\udc00"}`), PayloadSize: 14, RunAt: now, CreatedAt: now, UpdatedAt: now}
		if _, err := c.Store().Enqueue(ctx, []*Task{old}, store.EnqueueOpts{Merge: c.e.EnqueueOpts(ctx, nil, nil).Merge}); err != nil {
			t.Fatal(err)
		}
		_, err = c.Enqueue(ctx, EnqueueParams{Queue: "q", Kind: "app", MergeKey: "old", Payload: json.RawMessage(`{"n":1}`)})
		wantRefused(t, "append merge into an old payload", err, "payload", "payload[0].a")
		if tk, err := c.Get(ctx, "m-old"); err != nil || string(tk.Payload) != `{"a":"\udc00"}` {
			t.Errorf("m-old after the refused merge: %s %v", tk.Payload, err)
		}
		// Nesting: 1000 deep is read by both stores' JSON functions; 1001 is
		// refused on both (SQLite reads no deeper).
		_, err = c.Enqueue(ctx, EnqueueParams{Queue: "deep", Kind: "k", Payload: json.RawMessage(nested(1001))})
		wantRefused(t, "1001 deep", err, "payload", "is nested more than 1000")
		if _, err := c.Enqueue(ctx, EnqueueParams{ID: "deep-1000", Queue: "deep", Kind: "k", Payload: json.RawMessage(nested(1000))}); err != nil {
			t.Fatal(err)
		}
		if ts, err := c.List(ctx, ListParams{Queue: "deep", Where: `has(payload.a)`}); err != nil || len(ts) != 1 {
			t.Errorf("a where in SQL over a 1000-deep payload: %d tasks, %v", len(ts), err)
		}
		if n := count(); n != 5 {
			t.Errorf("%d tasks after the refusals, want the 4 merge targets and deep-1000", n)
		}
		for _, k := range []string{"app", "rep", "fn"} {
			if tk, err := c.Get(ctx, "m-"+k); err != nil || string(tk.Payload) != `{"n":1}` {
				t.Errorf("merge target %s: %s %v, want its payload unchanged", k, tk.Payload, err)
			}
		}
		if _, err := c.WorkflowRun(ctx, "bad-input"); !errors.Is(err, ErrNotFound) {
			t.Errorf("a run with a refused input exists: %v", err)
		}

		// Results: SetResult refuses the value and the attempt fails
		// permanently, even when the handler ignores the error; a later
		// good SetResult replaces the refused one.
		setErrs := make(chan error, 1)
		startWorker(t, c, map[string]Handler{
			"setbad": HandlerFunc(func(ctx context.Context, tk *Task) error {
				err := SetResult(ctx, json.RawMessage(`{"amount":1e200000}`))
				select {
				case setErrs <- err:
				default: // the workflow's step a runs it too
				}
				return nil
			}),
			"setfix": HandlerFunc(func(ctx context.Context, tk *Task) error {
				_ = SetResult(ctx, json.RawMessage(`{"a":"\udc00"}`))
				return SetResult(ctx, map[string]bool{"ok": true})
			}),
			"step": Step(func(ctx context.Context, s StepInput[json.RawMessage]) (map[string]string, error) {
				return map[string]string{"s": "a\x00b"}, nil // marshals as "a\u0000b"
			}),
			"fail": HandlerFunc(func(context.Context, *Task) error { return Permanent(errors.New("boom")) }),
			"ok":   HandlerFunc(func(context.Context, *Task) error { return nil }),
		})
		for id, kind := range map[string]string{"r-bad": "setbad", "r-fix": "setfix", "r-step": "step", "d1": "fail"} {
			if _, err := c.Enqueue(ctx, EnqueueParams{ID: id, Queue: "wf", Kind: kind, MaxAttempts: 5}); err != nil {
				t.Fatal(err)
			}
		}
		state := func(id string, want State) *Task {
			t.Helper()
			var tk *Task
			testwait.For(t, id+" "+string(want), func() bool {
				var err error
				tk, err = c.Get(ctx, id)
				return err == nil && tk.State == want
			})
			return tk
		}
		setErr := <-setErrs
		if !IsPermanent(setErr) || !errors.Is(setErr, ErrInvalid) {
			t.Errorf("SetResult of a bad result: %v, want a permanent validation error", setErr)
		}
		for id, path := range map[string]string{"r-bad": "result.amount", "r-step": "result.s"} {
			tk := state(id, StateDead)
			if tk.DeadReason != ReasonPermanentError || tk.Attempt != 1 || !strings.Contains(tk.LastError, path) {
				t.Errorf("%s: dead %s after %d attempts, error %q; want permanent_error at once naming %s", id, tk.DeadReason, tk.Attempt, tk.LastError, path)
			}
		}
		state("r-fix", StateSucceeded)
		run, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "wb"})
		if err != nil {
			t.Fatal(err)
		}
		r := waitRun(t, c, run.RunID, workflow.RunFailed)
		if a := stepOf(r, "a"); a.State != workflow.StepFailed || !strings.Contains(a.Error, "result.amount") {
			t.Errorf("step a: %+v, want failed naming result.amount", a)
		}
		if b := stepOf(r, "b"); b.TaskID != "" {
			t.Errorf("step b was enqueued after a refused result: %+v", b)
		}

		// Replay and redrive patches.
		state("d1", StateDead)
		for _, b := range jsonbBad {
			value := strings.TrimSuffix(b.doc[strings.Index(b.doc, ":")+1:], "}")
			for _, p := range []struct {
				name, field, path string
				rp                ReplayParams
			}{
				{"patch", "patch", "payload.x.y", ReplayParams{Patch: []PatchOp{{Path: "x.y", Value: json.RawMessage(value)}}}},
				{"merge patch", "merge_patch", "merge_patch" + b.path, ReplayParams{MergePatch: json.RawMessage(b.doc)}},
			} {
				p.rp.ID = "d1"
				_, err := c.Replay(ctx, p.rp)
				wantRefused(t, b.name+": replay "+p.name, err, p.field, p.path)
				_, err = c.Redrive(ctx, RedriveParams{Filter: ListParams{Queue: "wf"}, Patch: p.rp.Patch, MergePatch: p.rp.MergePatch}, nil)
				wantRefused(t, b.name+": redrive "+p.name, err, p.field, p.path)
				_, err = c.Redrive(ctx, RedriveParams{Filter: ListParams{Queue: "wf"}, Patch: p.rp.Patch, MergePatch: p.rp.MergePatch, DryRun: true}, nil)
				wantRefused(t, b.name+": redrive dry run "+p.name, err, p.field, p.path)
			}
		}
		if tk := state("d1", StateDead); tk.DLQStatus != DLQOpen || string(tk.Payload) != `{}` {
			t.Errorf("d1 after refused patches: %s %s, want open with its payload unchanged", tk.DLQStatus, tk.Payload)
		}
	})
}

// enqueueTx enqueues in a transaction of the store's own kind, rolled back.
func enqueueTx(ctx context.Context, c *Client, p EnqueueParams) ([]EnqueueResult, error) {
	switch s := c.Store().(type) {
	case *pgstore.Store:
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			return nil, err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		return c.EnqueueTx(ctx, tx, p)
	case *sqlitestore.Store:
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		defer func() { _ = tx.Rollback() }()
		return c.EnqueueTx(ctx, tx, p)
	}
	return nil, errors.New("unknown store")
}

// TestPatchedPayloadChecked: a patch over a payload stored before the rule
// cannot carry its out-of-range number on (422, not stored).
func TestPatchedPayloadChecked(t *testing.T) {
	t.Parallel()
	_, err := applyPatch(json.RawMessage(`{"amount":1e200000,"b":1}`), nil, []PatchOp{{Path: "b", Value: json.RawMessage(`2`)}})
	if !errors.Is(err, ErrUnprocessable) || !strings.Contains(err.Error(), "payload.amount") {
		t.Errorf("got %v, want unprocessable naming payload.amount", err)
	}
}

// nested is a document with depth arrays and objects one inside another.
func nested(depth int) string {
	return strings.Repeat(`{"a":[`, depth/2) + strings.Repeat("[", depth%2) + "1" +
		strings.Repeat("]", depth%2) + strings.Repeat("]}", depth/2)
}
