package backstop

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/backstophq/backstop/redact"
	"github.com/backstophq/backstop/store"
)

// Redaction: payload values under secret-looking keys (Config.RedactKeys
// plus redact.DefaultKeys) are masked wherever a payload leaves the store
// through the API or the CLI. An admin may see a raw payload; each task
// shown raw gets a `task.payload_viewed` event naming who looked.

// EventPayloadViewed is the audit event of a raw payload view.
const EventPayloadViewed = "task.payload_viewed"

// Masker is the client's payload masker.
func (c *Client) Masker() *redact.Masker { return redact.New(c.cfg.RedactKeys) }

// MaskTask returns a copy of t with its payload masked.
func (c *Client) MaskTask(m *redact.Masker, t *Task) *Task {
	if t == nil {
		return nil
	}
	cp := *t
	cp.Payload = m.JSON(cp.Payload)
	return &cp
}

// AuditPayloadViews records that actor saw these tasks' raw payloads, via
// (e.g. "GET /v1/tasks/{id}", "cli tasks show"): one event per task, in
// batches.
func (c *Client) AuditPayloadViews(ctx context.Context, actor, via string, tasks []*Task) error {
	body, _ := json.Marshal(map[string]string{"via": via})
	now := c.now()
	for len(tasks) > 0 {
		n := min(len(tasks), 500)
		evs := make([]Event, n)
		for i, t := range tasks[:n] {
			evs[i] = store.NewEvent(now, EventPayloadViewed, t.ID, t.Queue, t.Kind, c.actor(actor), body)
			evs[i].Attributes = t.Attributes
		}
		if err := c.store.AppendEvents(ctx, evs); err != nil {
			return err
		}
		tasks = tasks[n:]
	}
	return nil
}

// MaskEventBody masks the payload fragments of an event body: object keys
// (a merge patch, a payload) and patch operations ({"patch": [{"path",
// "value"}]}) whose path ends in a listed key.
func MaskEventBody(m *redact.Masker, body json.RawMessage) json.RawMessage {
	body = m.JSON(body)
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) != nil {
		return body
	}
	var ops []PatchOp
	if json.Unmarshal(obj["patch"], &ops) != nil || len(ops) == 0 {
		return body
	}
	changed := false
	for i, op := range ops {
		seg := op.Path[strings.LastIndexByte(op.Path, '.')+1:]
		if m.Matches(seg) {
			ops[i].Value = json.RawMessage(redact.Mask)
			changed = true
		}
	}
	if !changed {
		return body
	}
	obj["patch"], _ = json.Marshal(ops)
	b, err := json.Marshal(obj)
	if err != nil {
		return json.RawMessage(redact.Mask)
	}
	return b
}

// MaskEvents masks every event body (MaskEventBody).
func MaskEvents(m *redact.Masker, evs []Event) []Event {
	out := make([]Event, len(evs))
	for i, e := range evs {
		out[i] = e
		out[i].Body = MaskEventBody(m, e.Body)
	}
	return out
}
