package engine

import (
	"errors"
	"testing"
	"time"
)

// FuzzPrepareKeys: an idempotency window and a debounce are either refused
// with ErrInvalid or give a task whose unique_until, merge key and run
// time say what was asked: the window from now, the debounce key as the
// merge key, the run time one quiet period away.
func FuzzPrepareKeys(f *testing.F) {
	f.Add("idem", int64(time.Hour), "", int64(0), int64(0), "")
	f.Add("", int64(time.Hour), "", int64(0), int64(0), "")
	f.Add("idem", int64(-1), "d", int64(time.Second), int64(time.Minute), "")
	f.Add("", int64(0), "d", int64(time.Minute), int64(time.Second), "")
	f.Add("", int64(0), "d", int64(0), int64(0), "d")
	f.Add("", int64(0), "\xff", int64(1), int64(0), "other")
	c := &Engine{cfg: (&Config{}).withDefaults()}
	now := time.Now().UTC().Truncate(time.Microsecond)
	f.Fuzz(func(t *testing.T, idem string, uniqueFor int64, key string, quiet, maxWait int64, mergeKey string) {
		p := &EnqueueParams{Queue: "q", Kind: "k", IdempotencyKey: idem, UniqueFor: time.Duration(uniqueFor),
			MergeKey: mergeKey}
		if key != "" || quiet != 0 || maxWait != 0 {
			p.Debounce = &Debounce{Key: key, For: time.Duration(quiet), MaxWait: time.Duration(maxWait)}
		}
		task, err := c.Prepare(p, now)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("non-validation error: %v", err)
			}
			return
		}
		switch {
		case uniqueFor > 0 && (task.UniqueUntil == nil || !task.UniqueUntil.Equal(now.Add(time.Duration(uniqueFor)).Truncate(time.Microsecond))):
			t.Fatalf("unique_for %d: unique_until %v", uniqueFor, task.UniqueUntil)
		case uniqueFor <= 0 && task.UniqueUntil != nil:
			t.Fatalf("no window, unique_until %v", task.UniqueUntil)
		case uniqueFor > 0 && idem == "":
			t.Fatal("accepted a window without an idempotency key")
		}
		if d := p.Debounce; d != nil {
			if d.For <= 0 || d.Key == "" || task.MergeKey != d.Key || !task.RunAt.Equal(now.Add(d.For)) ||
				(d.MaxWait != 0 && d.MaxWait < d.For) || d.MaxWait < 0 {
				t.Fatalf("debounce %+v: accepted as merge key %q run_at %v", d, task.MergeKey, task.RunAt)
			}
		}
	})
}
