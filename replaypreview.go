package backstop

import (
	"context"
	"encoding/json"
	"fmt"
)

// PreviewReplay answers the payload a patched replay of dead letter id would
// run with, computed by the replay's own patch rules (applyPatch), and
// changes nothing: the web console shows it before the operator confirms.
// ErrNotFound when the task is unknown or not dead; ErrUnprocessable when the
// patch does not fit the payload or the result is over the payload limit.
func (c *Client) PreviewReplay(ctx context.Context, id string, merge json.RawMessage, ops []PatchOp) (json.RawMessage, error) {
	if err := ValidID(id); err != nil {
		return nil, invalid("id", "%v", err)
	}
	if err := checkPatch(merge, ops); err != nil {
		return nil, err
	}
	t, err := c.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if t.State != StateDead {
		return nil, fmt.Errorf("%w: task %q is %s, not a dead letter", ErrNotFound, id, t.State)
	}
	if len(merge) == 0 && len(ops) == 0 {
		return t.Payload, nil
	}
	base, err := c.patchBase(ctx, t) // steppayload.go
	if err != nil {
		return nil, err
	}
	payload, err := applyPatch(base, merge, ops)
	if err != nil {
		return nil, err
	}
	if len(payload) > c.cfg.MaxPayloadSize {
		return nil, unprocessable("patch: the patched payload is %d bytes; the maximum is %d", len(payload), c.cfg.MaxPayloadSize)
	}
	return payload, nil
}
