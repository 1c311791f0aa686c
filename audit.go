package backstop

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/backstophq/backstop/internal/engine"
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

// MaxReasonBytes bounds the reason an operator gives for an action (replay,
// redrive, discard, resolve, purge, cancel).
const MaxReasonBytes = 1024

// CheckReason is the one rule for an operator's reason: UTF-8 text without
// NUL, at most MaxReasonBytes, and present when required (Config.
// RequireReason: every operator action needs one). field names the input
// in errors (the API and CLI of a redrive call it "why": their "reason"
// filters dead letters by theirs).
func CheckReason(field, reason string, required bool) error {
	if err := engine.CheckText(field, reason); err != nil {
		return err
	}
	if len(reason) > MaxReasonBytes {
		return invalid(field, "is %d bytes; the maximum is %d", len(reason), MaxReasonBytes)
	}
	if required && strings.TrimSpace(reason) == "" {
		return invalid(field, "is required: this deployment requires a reason for every operator action (dlq.require_reason)")
	}
	return nil
}

// CheckReason checks an operator's reason by the client's configuration.
func (c *Client) CheckReason(field, reason string) error {
	return CheckReason(field, reason, c.cfg.RequireReason)
}

func (c *Client) checkReason(field, reason string) error { return c.CheckReason(field, reason) }

// withReason adds a non-empty reason to an event body.
func withReason(body map[string]any, reason string) map[string]any {
	if reason != "" {
		body["reason"] = reason
	}
	return body
}

// CancelParams cancels one task. Reason is recorded in the history's
// task.canceled (or task.cancel_requested) event with the actor.
type CancelParams struct {
	ID     string
	Reason string
	// Actor: who cancels. Default: the context's actor (WithActor), else
	// "library".
	Actor string
}

// CancelTask is Cancel with a reason (required when Config.RequireReason).
func (c *Client) CancelTask(ctx context.Context, p CancelParams) (*Task, error) {
	if err := c.checkReason("reason", p.Reason); err != nil {
		return nil, err
	}
	if err := engine.CheckText("actor", p.Actor); err != nil {
		return nil, err
	}
	if p.Actor != "" {
		ctx = store.WithActor(ctx, p.Actor)
	}
	if p.Reason != "" {
		ctx = store.WithReason(ctx, p.Reason)
	}
	t, err := c.store.RequestCancel(ctx, p.ID, c.cfg.Clock.Now())
	if err == nil {
		c.e.StepCanceled(ctx, t) // workflows.go: a waiting step's run learns of it
	}
	return t, err
}
