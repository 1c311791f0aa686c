package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
)

// testComplexity: a queue's complexity policy marks, routes and records
// too-complex tasks, and their dead-lettering carries the mark (seed 000).
func (s *suite) testComplexity(t *testing.T) {
	t.Parallel()
	b := s.setup(t, &backstop.Config{Queues: map[string]backstop.QueueConfig{
		"cx":     {Complexity: backstop.ComplexityPolicy{MaxComplexity: 5, MaxPayloadBytes: 64, RouteTo: "cx-big"}},
		"cx-big": {MaxAttempts: 1},
		"flag":   {Complexity: backstop.ComplexityPolicy{MaxComplexity: 1}},
	}})

	simple := b.enqueue(backstop.EnqueueParams{ID: "simple", Queue: "cx", Kind: "k", Complexity: 5})
	if simple.Queue != "cx" || simple.Attributes[backstop.TooComplexAttribute] != "" {
		t.Fatalf("complexity at the threshold is not too complex: queue %q attrs %v", simple.Queue, simple.Attributes)
	}
	eq(t, "events of a simple task", b.types("simple"), []string{"task.enqueued"})

	heavy := b.enqueue(backstop.EnqueueParams{ID: "heavy", Queue: "cx", Kind: "k", Complexity: 9,
		Attributes: map[string]string{"run_id": "r1"}})
	if heavy.Queue != "cx-big" || heavy.Attributes[backstop.TooComplexAttribute] != "true" || heavy.Attributes["run_id"] != "r1" {
		t.Fatalf("too complex: want routed to cx-big and marked, got queue %q attrs %v", heavy.Queue, heavy.Attributes)
	}
	if heavy.MaxAttempts != 1 {
		t.Fatalf("a routed task takes its new queue's settings: max_attempts %d, want 1", heavy.MaxAttempts)
	}
	eq(t, "events of a too-complex task", b.types("heavy"), []string{"task.enqueued", "task.too_complex"})
	evs, err := b.c.Events(b.ctx, "heavy")
	if err != nil {
		t.Fatal(err)
	}
	bd := body(t, evs[1])
	eq(t, "too_complex body queue", bd["queue"], any("cx"))
	eq(t, "too_complex body routed_to", bd["routed_to"], any("cx-big"))
	eq(t, "too_complex body complexity", bd["complexity"], any(float64(9)))
	eq(t, "too_complex event queue", evs[1].Queue, "cx-big")

	big := b.enqueue(backstop.EnqueueParams{ID: "big", Queue: "cx", Kind: "k",
		Payload: []byte(`{"blob":"` + strings.Repeat("x", 80) + `"}`)})
	if big.Queue != "cx-big" || big.Attributes[backstop.TooComplexAttribute] != "true" {
		t.Fatalf("payload over max_payload_bytes: want too complex, got queue %q attrs %v", big.Queue, big.Attributes)
	}

	// Without route_to the task stays; a batch writes one event per
	// too-complex task, in the enqueue's transaction.
	rs, err := b.c.EnqueueMany(b.ctx, []backstop.EnqueueParams{
		{ID: "f1", Queue: "flag", Kind: "k", Complexity: 2},
		{ID: "f2", Queue: "flag", Kind: "k", Complexity: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Task.Queue != "flag" || rs[0].Task.Attributes[backstop.TooComplexAttribute] != "true" || rs[1].Task.Attributes[backstop.TooComplexAttribute] != "" {
		t.Fatalf("batch: %+v / %+v", rs[0].Task, rs[1].Task)
	}
	eq(t, "events of f1", b.types("f1"), []string{"task.enqueued", "task.too_complex"})
	eq(t, "events of f2", b.types("f2"), []string{"task.enqueued"})

	// Producers may not set the mark; nothing is written.
	_, err = b.c.Enqueue(b.ctx, backstop.EnqueueParams{ID: "forged", Queue: "flag", Kind: "k",
		Attributes: map[string]string{backstop.TooComplexAttribute: "false"}})
	if !errors.Is(err, backstop.ErrInvalid) {
		t.Fatalf("producer-set too_complex: want ErrInvalid, got %v", err)
	}
	if _, err := b.c.Get(b.ctx, "forged"); !errors.Is(err, backstop.ErrNotFound) {
		t.Fatalf("refused enqueue wrote the task: %v", err)
	}

	// Its dead-lettering is escalated: the dead-letter event carries the mark.
	b.worker(&backstop.WorkerConfig{Queues: map[string]int{"cx-big": 2}}, map[string]backstop.Handler{
		"k": backstop.HandlerFunc(func(context.Context, *backstop.Task) error {
			return backstop.Permanent(errors.New("too big to handle"))
		}),
	})
	b.waitState("heavy", backstop.StateDead)
	types := b.waitTypes("heavy", 6)
	eq(t, "events of a too-complex dead letter", types, []string{"task.enqueued", "task.too_complex",
		"task.claimed", "task.started", "task.failed", "task.dead_lettered"})
	evs, err = b.c.Events(b.ctx, "heavy")
	if err != nil {
		t.Fatal(err)
	}
	if dl := evs[5]; dl.Attributes[backstop.TooComplexAttribute] != "true" {
		t.Fatalf("task.dead_lettered of a too-complex task: attributes %v, want too_complex=true", dl.Attributes)
	}
	dead, err := b.c.List(b.ctx, backstop.ListParams{States: []backstop.State{backstop.StateDead},
		Attrs: map[string]string{backstop.TooComplexAttribute: "true"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) < 1 || dead[0].ID != "heavy" && dead[len(dead)-1].ID != "heavy" {
		t.Fatalf("dead letters with too_complex=true: %d", len(dead))
	}
}
