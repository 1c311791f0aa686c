package backstop

import (
	"context"
	"encoding/json"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow"
)

// WithReason returns a context carrying the operator's reason for an action
// whose call takes none (pausing or resuming a queue, applying a workflow,
// canceling a run): the action's audit event records it (docs/events.md,
// "The audit stream").
func WithReason(ctx context.Context, reason string) context.Context {
	return store.WithReason(ctx, reason)
}

// auditEvent is an operator action on target as an event of the audit
// stream: the actor (given, else the context's, else "library"), the time,
// the context's reason (WithReason) and extra fields. The store writes it
// with the action, in its transaction.
func (c *Client) auditEvent(ctx context.Context, typ, target, actor string, extra map[string]any) Event {
	if actor == "" {
		actor = store.ActorFrom(ctx, store.DefaultActor)
	}
	return store.AuditEvent(c.now(), typ, target, actor, store.ReasonFrom(ctx), extra)
}

// audit records an operator action that already happened (its store
// write cannot carry the event yet): a failure to record it is logged,
// not returned.
func (c *Client) audit(ctx context.Context, typ, target, actor string, extra map[string]any) {
	ev := c.auditEvent(ctx, typ, target, actor, extra)
	if err := c.store.AppendEvents(context.WithoutCancel(ctx), []Event{ev}); err != nil {
		c.cfg.Logger.Warn("recording an operator action", "type", typ, "target", target, "error", err)
	}
}

// reasonOnEvent adds the operator's reason (when there is one) to the
// plan's events of type typ: a run's cancel carries it in run.canceled.
func reasonOnEvent(plan *workflow.Plan, typ, reason string) {
	if reason == "" {
		return
	}
	for i, e := range plan.Events {
		if e.Type != typ {
			continue
		}
		body := map[string]any{}
		if err := json.Unmarshal(e.Body, &body); err != nil {
			continue
		}
		if b, err := json.Marshal(withReason(body, reason)); err == nil {
			plan.Events[i].Body = b
		}
	}
}
