package backstop

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// FuzzPrepare: whatever a producer sends, validation either refuses it with
// ErrInvalid or yields a task that is safe to store.
func FuzzPrepare(f *testing.F) {
	f.Add("id-1", "q", "k", []byte(`{"a":1}`), "tenant", "t1", 3, int64(0))
	f.Add("", "", "", []byte(``), "", "", -1, int64(-5))
	f.Add("a b", "q/x", "ü", []byte(`{nope`), "bad key", "\xff", 0, int64(1e18))
	f.Add("x", "q", "k", []byte(`"`+string(make([]byte, 100))+`"`), "_k", "v", 1, int64(time.Second))
	c := &Client{cfg: (&Config{MaxPayloadSize: 4096}).withDefaults()}
	now := time.Now().UTC()
	f.Fuzz(func(t *testing.T, id, queue, kind string, payload []byte, ak, av string, attempts int, delay int64) {
		p := &EnqueueParams{ID: id, Queue: queue, Kind: kind, Payload: payload, MaxAttempts: attempts,
			Delay: time.Duration(delay), Attributes: map[string]string{ak: av}}
		task, err := c.prepare(p, now)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("non-validation error: %v", err)
			}
			return
		}
		if !json.Valid(task.Payload) || len(task.Payload) > 4096 {
			t.Fatalf("accepted bad payload %q", task.Payload)
		}
		if validName(task.ID) != nil || validName(task.Queue) != nil || validName(task.Kind) != nil {
			t.Fatalf("accepted bad name: %q %q %q", task.ID, task.Queue, task.Kind)
		}
		if task.MaxAttempts < 1 || task.RunAt.Before(now) {
			t.Fatalf("accepted bad attempts/run_at: %d %v", task.MaxAttempts, task.RunAt)
		}
		if task.State != bt.StatePending && task.State != bt.StateScheduled {
			t.Fatalf("state %s", task.State)
		}
	})
}

// FuzzRetryPolicyJSON: a stored or supplied policy never panics and never
// yields a negative delay once validated.
func FuzzRetryPolicyJSON(f *testing.F) {
	f.Add([]byte(`{"schedule":["1s","2s"]}`), 3)
	f.Add([]byte(`{"base":"1ms","factor":10,"max":"1h"}`), 40)
	f.Add([]byte(`{"base":-1}`), 1)
	f.Fuzz(func(t *testing.T, data []byte, attempt int) {
		var p bt.RetryPolicy
		if json.Unmarshal(data, &p) != nil || p.Validate() != nil {
			return
		}
		if d := p.Delay(attempt%1000, 0.99); d < 0 {
			t.Fatalf("negative delay %s for %s attempt %d", d, data, attempt)
		}
	})
}
