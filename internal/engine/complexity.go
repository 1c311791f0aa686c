package engine

import (
	"context"
	"encoding/json"
	"fmt"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// ComplexityPolicy says when a task of a queue is too complex (seed 000:
// complexity or payload size over a threshold). Such a task is still
// enqueued, but it carries the attribute too_complex=true on every signal
// about it (so its dead-lettering is escalated: the task.dead_lettered event
// and the dead-letter metric carry it), its enqueue writes a
// task.too_complex event in the same transaction, and it may be routed to
// another queue.
type ComplexityPolicy struct {
	// MaxComplexity: a task whose complexity is above this is too complex.
	// 0: no threshold.
	MaxComplexity float64
	// MaxPayloadBytes: a task whose payload is larger is too complex.
	// 0: no threshold.
	MaxPayloadBytes int
	// RouteTo moves too-complex tasks to this queue (whose settings then
	// apply). Empty: they stay.
	RouteTo string
}

// TooComplexAttribute marks a task the complexity policy of its queue
// found too complex. The engine sets it; producers may not.
const TooComplexAttribute = "too_complex"

func (p ComplexityPolicy) validate(queue string) error {
	if p.MaxComplexity < 0 {
		return fmt.Errorf("queue %q: complexity.max_complexity must not be negative", queue)
	}
	if p.MaxPayloadBytes < 0 {
		return fmt.Errorf("queue %q: complexity.max_payload_bytes must not be negative", queue)
	}
	if p.RouteTo != "" {
		if err := ValidName(p.RouteTo); err != nil {
			return fmt.Errorf("queue %q: complexity.route_to: %v", queue, err)
		}
		if p.RouteTo == queue {
			return fmt.Errorf("queue %q: complexity.route_to names the queue itself", queue)
		}
	}
	return nil
}

// tooComplex applies queue's policy to a task of that complexity and
// payload size: whether it is too complex, and the queue it goes to.
func (c *Config) tooComplex(queue string, complexity float64, payloadSize int) (bool, string) {
	p := c.Queues[queue].Complexity
	over := p.MaxComplexity > 0 && complexity > p.MaxComplexity ||
		p.MaxPayloadBytes > 0 && payloadSize > p.MaxPayloadBytes
	if !over {
		return false, queue
	}
	if p.RouteTo != "" {
		return true, p.RouteTo
	}
	return true, queue
}

// tooComplexEvents are the task.too_complex events of a prepared batch
// (written by the store in the enqueue's transaction).
func (e *Engine) tooComplexEvents(ctx context.Context, params []EnqueueParams, tasks []*Task) []bt.Event {
	var out []bt.Event
	for i, t := range tasks {
		if t.Attributes[TooComplexAttribute] != "true" {
			continue
		}
		from := params[i].Queue
		p := e.cfg.Queues[from].Complexity
		body, _ := json.Marshal(map[string]any{
			"complexity": t.Complexity, "payload_size": t.PayloadSize,
			"max_complexity": p.MaxComplexity, "max_payload_bytes": p.MaxPayloadBytes,
			"queue": from, "routed_to": p.RouteTo,
		})
		ev := store.NewEvent(t.CreatedAt, "task.too_complex", t.ID, t.Queue, t.Kind, store.ActorFrom(ctx, store.DefaultActor), body)
		ev.Attributes = t.Attributes
		out = append(out, ev)
	}
	return out
}

// Enqueued counts what an enqueue that committed wrote: its too-complex
// tasks, and on queues rolling ordering out, the tasks ordered and left
// unordered (backstop_tasks_too_complex_total,
// backstop_ordering_rollout_{ordered,unordered}_total).
func (e *Engine) Enqueued(ctx context.Context, tasks []*Task) {
	for _, t := range tasks {
		if t.Attributes[TooComplexAttribute] == "true" {
			e.countTooComplex(ctx, t)
		}
		if o, ok := e.queueOrdering(t.Queue); ok && o.EnabledFor != nil {
			st := e.orderingByQueue[t.Queue]
			for _, s := range []*OrderingStats{&e.ordering, st} {
				if s == nil {
					continue
				}
				if t.OrderingKey != "" {
					s.RolloutOrdered.Add(1)
				} else if t.Attributes[OrderingRolloutAttribute] == "out" {
					s.RolloutUnordered.Add(1)
				}
			}
		}
	}
}
