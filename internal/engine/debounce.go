package engine

import (
	"context"
	"time"

	"github.com/backstophq/backstop/store"
)

// Debounce delays a task until its key has been quiet for For, but never
// longer than MaxWait after the first enqueue (Inngest's and Trigger.dev's
// debounce), on top of merge keys: the key is the task's merge key (per
// kind). An enqueue while a task of the key waits (scheduled or pending)
// merges its payload into it by the kind's merge rule — replace, the
// default, keeps the newest payload — and moves its run time to now + For,
// capped at the waiting task's creation + MaxWait. While the task runs, an
// enqueue makes a new waiting task. Each merge is a task.enqueued event
// with "debounced": true on the waiting task.
type Debounce struct {
	// Key names what is debounced; required, at most 255 bytes.
	Key string
	// For: the quiet period; required, positive.
	For time.Duration
	// MaxWait bounds the delay from the first enqueue; 0: none, else at
	// least For.
	MaxWait time.Duration
}

// maxDebounce bounds the quiet period and the maximum wait.
const maxDebounce = 366 * 24 * time.Hour

// check validates a debounced enqueue and returns the task's merge key.
func (d *Debounce) check(p *EnqueueParams) (string, error) {
	if d == nil {
		return p.MergeKey, nil
	}
	switch {
	case d.Key == "":
		return "", Invalid("debounce.key", "is required")
	case len(d.Key) > maxKeyLen:
		return "", Invalid("debounce.key", "is longer than %d bytes", maxKeyLen)
	case d.For <= 0:
		return "", Invalid("debounce.for", "must be a positive duration (got %s)", d.For)
	case d.MaxWait < 0:
		return "", Invalid("debounce.max_wait", "must not be negative (got %s)", d.MaxWait)
	case d.MaxWait > 0 && d.MaxWait < d.For:
		return "", Invalid("debounce.max_wait", "(%s) must be at least debounce.for (%s)", d.MaxWait, d.For)
	case p.MergeKey != "" && p.MergeKey != d.Key:
		return "", Invalid("merge_key", "a debounced task's merge key is its debounce key: give one of them")
	case !p.RunAt.IsZero() || p.Delay > 0:
		return "", Invalid("debounce", "sets the task's run time: give no run_at or delay")
	case d.For > maxDebounce || d.MaxWait > maxDebounce:
		return "", Invalid("debounce", "waits of more than a year are not debouncing")
	case p.OrderingKey != "":
		return "", Invalid("debounce", "cannot be combined with an ordering key (the debounced task's run time moves)")
	}
	if err := CheckText("debounce.key", d.Key); err != nil {
		return "", err
	}
	return d.Key, nil
}

// debounceOpts are the store's debounce options of an enqueue (nil when no
// task is debounced).
func debounceOpts(params []EnqueueParams) []store.Debounce {
	var out []store.Debounce
	for i, p := range params {
		if p.Debounce == nil {
			continue
		}
		if out == nil {
			out = make([]store.Debounce, len(params))
		}
		out[i] = store.Debounce{Debounced: true, MaxWait: p.Debounce.MaxWait, For: p.Debounce.For}
	}
	return out
}

// WithDebounce sets Debounce on the debounced tasks among tasks (those
// with a merge key: a debounced task's key is its merge key): their
// key, quiet period and max-wait deadline, as stored with the task.
func (e *Engine) WithDebounce(ctx context.Context, tasks []*Task) error {
	for _, t := range tasks {
		if t.MergeKey == "" {
			continue
		}
		d, err := e.store.TaskDebounce(ctx, t.ID)
		if err != nil {
			return err
		}
		t.Debounce = d
	}
	return nil
}
