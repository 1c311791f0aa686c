package backstop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/internal/remote"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/workflow"
)

const fanOutWorkflow = `
name: fan
queue: wf
steps:
  - id: each
    kind: each
    for_each: input.items
  - id: sum
    kind: sum
    needs: [each]
`

// sumHandler records the results of each that sum receives.
func sumHandler(got *string) Handler {
	var mu sync.Mutex
	return Step(func(ctx context.Context, s StepInput[json.RawMessage]) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		*got = string(s.Results["each"])
		return 0, nil
	})
}

// fanInput is a run input with a 20 KB string and n items 0..n-1.
func fanInput(n int) (json.RawMessage, string) {
	big := strings.Repeat("z", 20000)
	items := make([]int, n)
	for i := range items {
		items[i] = i
	}
	b, _ := json.Marshal(map[string]any{"big": big, "items": items, "mult": 2})
	return b, big
}

// checkItemPayload: p is exactly the documented payload of item i of a
// first step: input (the run's), results, item, index.
func checkItemPayload(t *testing.T, where string, p, input json.RawMessage, i int) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(p, &m); err != nil {
		t.Fatalf("%s: %v: %.200s", where, err, p)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var in bytes.Buffer
	_ = json.Compact(&in, m["input"])
	if !slices.Equal(keys, []string{"index", "input", "item", "results"}) || in.String() != string(input) ||
		string(m["results"]) != "{}" || string(m["item"]) != fmt.Sprint(i) || string(m["index"]) != fmt.Sprint(i) {
		t.Fatalf("%s: payload keys %v, item %s, index %s, results %s, input %.80s…", where, keys, m["item"], m["index"], m["results"], m["input"])
	}
}

// TestWorkflowFanOutItemsReferTheRunInput: the stored payload of a fan-out
// item does not copy the run's input; a remote worker's claim and an
// in-process handler still receive the documented payload, input included.
func TestWorkflowFanOutItemsReferTheRunInput(t *testing.T) {
	t.Parallel()
	forEachWorkflowStore(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		applyYAML(t, c, fanOutWorkflow)
		input, big := fanInput(10)
		run, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "fan", Input: input})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			st, err := c.Get(ctx, fmt.Sprintf("%s.each.%d", run.RunID, i))
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Payload) > 300 || bytes.Contains(st.Payload, []byte(big)) {
				t.Fatalf("item %d stores %d bytes: %.120s…", i, len(st.Payload), st.Payload)
			}
			if workflow.InputRefOf(st.Payload) != run.RunID {
				t.Fatalf("item %d stores %s", i, st.Payload)
			}
		}
		// Three items through the remote protocol.
		ls, err := remote.New(c.Engine()).Claim(ctx, remote.Claim{Queues: []string{"wf"}, WorkerID: "rw", Max: 3})
		if err != nil || len(ls) != 3 {
			t.Fatalf("claim: %d leases, %v", len(ls), err)
		}
		for _, l := range ls {
			i := indexOf(t, l.Task.ID)
			checkItemPayload(t, "remote claim of "+l.Task.ID, l.Task.Payload, input, i)
			if _, err := remote.New(c.Engine()).Complete(ctx, l.Task.ID, l.LeaseToken, nil, json.RawMessage(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
		}
		// The others in process.
		var mu sync.Mutex
		seen := map[string]json.RawMessage{}
		var sum string
		startWorker(t, c, map[string]Handler{"each": HandlerFunc(func(ctx context.Context, tk *Task) error {
			mu.Lock()
			seen[tk.ID] = tk.Payload
			mu.Unlock()
			return SetResult(ctx, indexOf(t, tk.ID))
		}), "sum": sumHandler(&sum)})
		r := waitRun(t, c, run.RunID, workflow.RunSucceeded, workflow.RunFailed)
		mu.Lock()
		if r.State != workflow.RunSucceeded || sum != "[0,1,2,3,4,5,6,7,8,9]" {
			t.Fatalf("run %s, each's results %s", r.State, sum)
		}
		defer mu.Unlock()
		if len(seen) != 7 {
			t.Fatalf("the worker ran %d items, want 7", len(seen))
		}
		for id, p := range seen {
			checkItemPayload(t, "worker's "+id, p, input, indexOf(t, id))
		}
	})
}

func indexOf(t *testing.T, taskID string) int {
	t.Helper()
	var i int
	if _, err := fmt.Sscan(taskID[strings.LastIndexByte(taskID, '.')+1:], &i); err != nil {
		t.Fatalf("%s: %v", taskID, err)
	}
	return i
}

// TestWorkflowFanOutBound: a run whose first fan-out passes
// MaxFanOutBytes is refused naming the bound, and nothing is written; a
// fan-out that passes it when its step becomes ready fails the step
// permanently, without enqueueing an item.
func TestWorkflowFanOutBound(t *testing.T) {
	t.Parallel()
	forEachStoreClient(t, func() *Config { return &Config{MaxFanOutBytes: 4096} }, func(t *testing.T, c *Client) {
		ctx := context.Background()
		applyYAML(t, c, fanOutWorkflow)
		input, _ := fanInput(500)
		_, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "fan", Input: input, RunID: "bound-1"})
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != "input" || !strings.Contains(err.Error(), "limits.max_fanout_bytes") ||
			!strings.Contains(err.Error(), "fan-out bound of 4096 bytes") || !errors.Is(err, ErrInvalid) {
			t.Fatalf("run: %v", err)
		}
		if _, err := c.WorkflowRun(ctx, "bound-1"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("the refused run: %v", err)
		}
		if _, err := c.Get(ctx, "bound-1.each.0"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("an item of the refused run: %v", err)
		}
		// 10 items are within the bound (the input is not counted).
		small, _ := fanInput(10)
		if _, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "fan", Input: small}); err != nil {
			t.Fatalf("a small fan-out: %v", err)
		}

		applyYAML(t, c, `
name: later
queue: wf
steps:
  - {id: a, kind: a}
  - {id: each, kind: each, needs: [a], for_each: input.items}
`)
		run, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "later", Input: input})
		if err != nil {
			t.Fatal(err)
		}
		startWorker(t, c, map[string]Handler{
			"a":    HandlerFunc(func(ctx context.Context, tk *Task) error { return nil }),
			"each": HandlerFunc(func(ctx context.Context, tk *Task) error { return nil }),
		})
		r := waitRun(t, c, run.RunID, workflow.RunFailed)
		if s := stepOf(r, "each"); s.State != workflow.StepFailed || !strings.Contains(s.Error, "fan-out bound of 4096 bytes") {
			t.Fatalf("each: %+v", s)
		}
		if _, err := c.Get(ctx, run.RunID+".each.0"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("an item of the refused fan-out: %v", err)
		}
	})
}

// TestStepInputGone: a task that refers to a run input that does not exist
// (its run was deleted, or it only looks like a step) never reaches a
// handler: it dead-letters, saying why.
func TestStepInputGone(t *testing.T) {
	t.Parallel()
	forEachWorkflowStore(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		_, err := c.Enqueue(ctx, EnqueueParams{ID: "ghost.each.0", Queue: "wf", Kind: "each", MaxAttempts: 3,
			Attributes: map[string]string{workflow.AttrRunID: "ghost"},
			Payload:    json.RawMessage(`{"index":0,"input_of_run":"ghost","item":1,"results":{}}`)})
		if err != nil {
			t.Fatal(err)
		}
		var ran sync.WaitGroup
		ran.Add(1) // Done by the plain task only
		called := map[string]bool{}
		var mu sync.Mutex
		startWorker(t, c, map[string]Handler{"each": HandlerFunc(func(ctx context.Context, tk *Task) error {
			mu.Lock()
			called[tk.ID] = true
			mu.Unlock()
			if tk.ID == "plain" {
				if string(tk.Payload) != `{"input_of_run":"x"}` {
					t.Errorf("a plain task's payload was changed: %s", tk.Payload)
				}
				ran.Done()
			}
			return nil
		})})
		// A plain task with the same key is left alone.
		if _, err := c.Enqueue(ctx, EnqueueParams{ID: "plain", Queue: "wf", Kind: "each", Payload: json.RawMessage(`{"input_of_run":"x"}`)}); err != nil {
			t.Fatal(err)
		}
		ran.Wait()
		var tk *Task
		testwait.For(t, "ghost.each.0 to be dead", func() bool {
			var err error
			if tk, err = c.Get(ctx, "ghost.each.0"); err != nil {
				t.Fatal(err)
			}
			return tk.State == StateDead
		})
		if !strings.Contains(tk.LastError, "input is gone") || tk.Attempt != 1 {
			t.Fatalf("dead after %d attempts with %q", tk.Attempt, tk.LastError)
		}
		mu.Lock()
		defer mu.Unlock()
		if called["ghost.each.0"] {
			t.Fatal("the handler ran a task whose input is gone")
		}
		// A remote claim dead-letters it too, and hands out nothing.
		if _, err := c.Enqueue(ctx, EnqueueParams{ID: "ghost2.each.0", Queue: "wfr", Kind: "each",
			Attributes: map[string]string{workflow.AttrRunID: "ghost2"},
			Payload:    json.RawMessage(`{"index":0,"input_of_run":"ghost2","item":1,"results":{}}`)}); err != nil {
			t.Fatal(err)
		}
		ls, err := remote.New(c.Engine()).Claim(ctx, remote.Claim{Queues: []string{"wfr"}, WorkerID: "rw", Max: 5})
		if err != nil || len(ls) != 0 {
			t.Fatalf("remote claim: %d leases, %v", len(ls), err)
		}
		if tk, err := c.Get(ctx, "ghost2.each.0"); err != nil || tk.State != StateDead || !strings.Contains(tk.LastError, "input is gone") {
			t.Fatalf("after the remote claim: %+v %v", tk, err)
		}
	})
}

// TestWorkflowFanOutReplayPatchesTheInput: a patch replaying a fan-out
// item applies to the payload its handler receives: input.mult changes,
// the rest of the run's input is there.
func TestWorkflowFanOutReplayPatchesTheInput(t *testing.T) {
	t.Parallel()
	forEachWorkflowStore(t, func(t *testing.T, c *Client) {
		ctx := context.Background()
		applyYAML(t, c, fanOutWorkflow)
		input, big := fanInput(3)
		type in struct {
			Big  string `json:"big"`
			Mult int    `json:"mult"`
		}
		var sum string
		startWorker(t, c, map[string]Handler{"sum": sumHandler(&sum), "each": Step(func(ctx context.Context, s StepInput[in]) (int, error) {
			if s.Input.Big != big {
				return 0, Permanent(errors.New("the input lost big"))
			}
			if s.Index == 1 && s.Input.Mult == 2 {
				return 0, Permanent(errors.New("mult 2 is wrong for item 1"))
			}
			return s.Input.Mult * s.Index, nil
		})})
		run, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "fan", Input: input})
		if err != nil {
			t.Fatal(err)
		}
		waitRun(t, c, run.RunID, workflow.RunFailed)
		id := run.RunID + ".each.1"
		patch := []PatchOp{{Path: "input.mult", Value: json.RawMessage("3")}}
		pv, err := c.PreviewReplay(ctx, id, nil, patch)
		if err != nil || !bytes.Contains(pv, []byte(`"mult":3`)) || !bytes.Contains(pv, []byte(big)) || bytes.Contains(pv, []byte(workflow.InputRef)) {
			t.Fatalf("preview: %v %.100s", err, pv)
		}
		if _, err := c.Replay(ctx, ReplayParams{ID: id, Patch: patch}); err != nil {
			t.Fatal(err)
		}
		r := waitRun(t, c, run.RunID, workflow.RunSucceeded, workflow.RunFailed)
		if r.State != workflow.RunSucceeded || sum != "[0,3,4]" {
			t.Fatalf("run %s, each's results %s", r.State, sum)
		}
		// A copy under a new id is no step of the run: it stores its
		// payload whole.
		run2, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "fan", Input: input})
		if err != nil {
			t.Fatal(err)
		}
		waitRun(t, c, run2.RunID, workflow.RunFailed)
		cp, err := c.Replay(ctx, ReplayParams{ID: run2.RunID + ".each.1", NewID: true, Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if tk, err := c.Get(ctx, cp.NewID); err != nil || !bytes.Contains(tk.Payload, []byte(big)) || bytes.Contains(tk.Payload, []byte(workflow.InputRef)) {
			t.Fatalf("the copy: %v %.100s", err, tk.Payload)
		}
	})
}

// TestWorkflowRunKeptWhileAStepIsADeadLetter: retention keeps a finished
// run while one of its fan-out items is an open dead letter (a replay needs
// the run's input), and deletes it once the dead letter is closed.
func TestWorkflowRunKeptWhileAStepIsADeadLetter(t *testing.T) {
	t.Parallel()
	forEachStoreClient(t, func() *Config { return &Config{Retention: RetentionConfig{Runs: time.Nanosecond}} }, func(t *testing.T, c *Client) {
		ctx := context.Background()
		applyYAML(t, c, "name: cont\nqueue: wf\nsteps:\n  - {id: each, kind: each, for_each: input.items, on_failure: continue}\n")
		startWorker(t, c, map[string]Handler{"each": Step(func(ctx context.Context, s StepInput[json.RawMessage]) (int, error) {
			if s.Index == 1 {
				return 0, Permanent(errors.New("no"))
			}
			return s.Index, nil
		})})
		input, _ := fanInput(3)
		run, err := c.RunWorkflow(ctx, RunWorkflowParams{Workflow: "cont", Input: input})
		if err != nil {
			t.Fatal(err)
		}
		waitRun(t, c, run.RunID, workflow.RunPartial)
		// Retention a second on: the run finished longer ago than Runs.
		later := c.e.Now().Add(time.Second)
		if _, err := maintenance.Retain(ctx, c.store, later, maintenance.PolicyOf(c.cfg)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.WorkflowRun(ctx, run.RunID); err != nil {
			t.Fatalf("the run with an open dead item: %v", err)
		}
		if _, err := c.Discard(ctx, DiscardParams{ID: run.RunID + ".each.1", Reason: "test"}); err != nil {
			t.Fatal(err)
		}
		if _, err := maintenance.Retain(ctx, c.store, later, maintenance.PolicyOf(c.cfg)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.WorkflowRun(ctx, run.RunID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("the run once its dead letter is closed: %v", err)
		}
	})
}
