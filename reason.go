package backstop

import (
	"context"
	"strings"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/store"
)

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
