package backstop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/filter"
	"github.com/backstophq/backstop/redact"
	"github.com/backstophq/backstop/store"
)

// DefaultRedriveSample is how many dead letters a dry run shows.
const DefaultRedriveSample = 5

// RedrivePreview is what a dry run of a redrive reports (RedriveParams.DryRun):
// how many open dead letters match now, and a sample of them, each with the
// before/after of its payload when the redrive patches. Nothing is changed:
// no redrive record, no event.
type RedrivePreview struct {
	Matched int             `json:"matched"`
	Sample  []RedriveSample `json:"sample"`
}

// RedriveSample is one dead letter a redrive would replay.
type RedriveSample struct {
	ID     string     `json:"id"`
	Queue  string     `json:"queue"`
	Kind   string     `json:"kind"`
	Reason DeadReason `json:"reason,omitempty"`
	// State: a task action's sampled task's state.
	State State  `json:"state,omitempty"`
	Error string `json:"error,omitempty"`
	// Diff: with a patch, the payload before and after it.
	Diff *PayloadDiff `json:"diff,omitempty"`
}

// PayloadDiff is a patch's effect on one payload: the payload before and
// after, and the changed places as RFC 6902 operation names (add, remove,
// replace) on RFC 6901 JSON pointers; the values are read from Before and
// After (which a caller masks as it masks payloads). Error, instead of
// After, says why the patch does not apply to this payload (the replay
// would fail as "patch did not apply").
type PayloadDiff struct {
	Before  json.RawMessage `json:"before"`
	After   json.RawMessage `json:"after,omitempty"`
	Changes []PayloadChange `json:"changes"`
	Error   string          `json:"error,omitempty"`
}

// PayloadChange is one changed place of a payload.
type PayloadChange struct {
	Op   string `json:"op"` // add | remove | replace
	Path string `json:"path"`
}

// Mask masks the sample's payloads with m (the diff's paths stay: they
// name fields, not values).
func (p *RedrivePreview) Mask(m *redact.Masker) {
	if p == nil {
		return
	}
	for i := range p.Sample {
		if d := p.Sample[i].Diff; d != nil {
			d.Before = m.JSON(d.Before)
			if len(d.After) > 0 {
				d.After = m.JSON(d.After)
			}
		}
	}
}

// redriveDryRun counts and samples what the redrive would select now.
// inGo: the where outside the SQL subset, counted in Go (countRedrive).
func (c *Client) redriveDryRun(ctx context.Context, p RedriveParams, f ListParams, inGo *filter.Expr, now time.Time) (out RedriveProgress, err error) {
	ctx = c.callBudget(ctx) // the count and the sample share one
	defer func() { err = engine.WhereErr(err) }()
	out = RedriveProgress{Snapshot: now, DryRun: true}
	n, err := c.countRedrive(ctx, store.RedriveBatch{Filter: f, Snapshot: now}, inGo)
	if err != nil {
		return out, fmt.Errorf("redrive: %w", err)
	}
	size := p.SampleSize
	if size == 0 {
		size = DefaultRedriveSample
	}
	pv := &RedrivePreview{Matched: n, Sample: []RedriveSample{}}
	if size > 0 && n > 0 {
		lf := redriveList(f, "", now)
		lf.Limit = size
		page, err := c.store.List(ctx, lf)
		if err != nil {
			return out, fmt.Errorf("redrive: %w", err)
		}
		patched := len(p.MergePatch) > 0 || len(p.Patch) > 0
		for _, t := range page {
			s := RedriveSample{ID: t.ID, Queue: t.Queue, Kind: t.Kind, Reason: t.DeadReason, Error: t.LastError}
			if patched {
				full, err := c.Get(ctx, t.ID) // the payload, even when spilled
				if err != nil {
					return out, err
				}
				base, err := c.patchBase(ctx, full)
				switch {
				case errors.Is(err, ErrUnprocessable):
					s.Diff = &PayloadDiff{Before: full.Payload, Changes: []PayloadChange{}, Error: err.Error()}
				case err != nil:
					return out, err
				default:
					s.Diff = c.payloadDiff(base, p.MergePatch, p.Patch)
				}
			}
			pv.Sample = append(pv.Sample, s)
		}
	}
	out.Total, out.Preview, out.Done = n, pv, true
	return out, nil
}

// payloadDiff applies the patch as a replay would and compares.
func (c *Client) payloadDiff(before json.RawMessage, merge json.RawMessage, ops []PatchOp) *PayloadDiff {
	if len(before) == 0 {
		before = json.RawMessage(`{}`)
	}
	d := &PayloadDiff{Before: before, Changes: []PayloadChange{}}
	after, err := applyPatch(before, merge, ops)
	if err == nil && len(after) > c.cfg.MaxPayloadSize {
		err = unprocessable("patch: the patched payload is %d bytes; the maximum is %d", len(after), c.cfg.MaxPayloadSize)
	}
	if err != nil {
		d.Error = err.Error()
		return d
	}
	d.After = after
	var a, b any
	if json.Unmarshal(before, &a) == nil && json.Unmarshal(after, &b) == nil {
		d.Changes = diffJSON("", a, b, d.Changes)
	}
	return d
}

// diffJSON lists where b differs from a, objects compared key by key
// (sorted), anything else replaced as a whole.
func diffJSON(path string, a, b any, out []PayloadChange) []PayloadChange {
	ao, aok := a.(map[string]any)
	bo, bok := b.(map[string]any)
	if !aok || !bok {
		if !reflect.DeepEqual(a, b) {
			out = append(out, PayloadChange{Op: "replace", Path: path})
		}
		return out
	}
	keys := make([]string, 0, len(ao)+len(bo))
	for k := range ao {
		keys = append(keys, k)
	}
	for k := range bo {
		if _, ok := ao[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		p := path + "/" + pointerToken(k)
		av, ina := ao[k]
		bv, inb := bo[k]
		switch {
		case !inb:
			out = append(out, PayloadChange{Op: "remove", Path: p})
		case !ina:
			out = append(out, PayloadChange{Op: "add", Path: p})
		default:
			out = diffJSON(p, av, bv, out)
		}
	}
	return out
}

// pointerToken escapes a key for an RFC 6901 JSON pointer.
func pointerToken(k string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
}

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
	base, err := c.patchBase(ctx, t)
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
