package engine

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"testing"
	"time"
	"unicode/utf8"

	bt "github.com/backstophq/backstop/backstoptype"
)

// FuzzPrepare: whatever a producer sends, validation either refuses it with
// ErrInvalid or yields a task that is safe to store: JSON that is valid
// UTF-8, names and keys a strict client can read, attempts and times in
// their bounds.
func FuzzPrepare(f *testing.F) {
	f.Add("id-1", "q", "k", []byte(`{"a":1}`), "tenant", "t1", 3, int64(0), "idem", int64(0), []byte(`null`))
	f.Add("", "", "", []byte(``), "", "", -1, int64(-5), "", int64(-62135596800), []byte(`{"base":"1s","schedule":["1s"]}`))
	f.Add("a b", "q/x", "ü", []byte(`{nope`), "bad key", "\xff", 0, int64(1e18), "\xff", int64(253402300800), []byte(`{"base":"2h"}`))
	f.Add("x", "q", "k", []byte(`"`+string(make([]byte, 100))+`"`), "_k", "v", 1, int64(time.Second), "k", int64(1), []byte(`{"factor":0.5}`))
	f.Add("x", "q", "k", []byte("{\"a\":\"\xff\xfe\"}"), "k", "v", 1000000000000, int64(0), "", int64(0), []byte(`{"schedule":["1s"]}`))
	c := &Engine{cfg: (&Config{MaxPayloadSize: 4096}).withDefaults()}
	now := time.Now().UTC()
	f.Fuzz(func(t *testing.T, id, queue, kind string, payload []byte, ak, av string, attempts int, delay int64,
		idem string, runAtUnix int64, retry []byte) {
		p := &EnqueueParams{ID: id, Queue: queue, Kind: kind, Payload: payload, MaxAttempts: attempts,
			Delay: time.Duration(delay), Attributes: map[string]string{ak: av}, IdempotencyKey: idem}
		if runAtUnix != 0 {
			p.RunAt = time.Unix(runAtUnix, 0)
		}
		var rp bt.RetryPolicy
		if json.Unmarshal(retry, &rp) == nil && !bytes.Equal(bytes.TrimSpace(retry), []byte("null")) {
			p.Retry = &rp
		}
		task, err := c.Prepare(p, now)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("non-validation error: %v", err)
			}
			return
		}
		if !json.Valid(task.Payload) || !utf8.Valid(task.Payload) || len(task.Payload) > 4096 {
			t.Fatalf("accepted bad payload %q", task.Payload)
		}
		if ValidName(task.ID) != nil || ValidName(task.Queue) != nil || ValidName(task.Kind) != nil {
			t.Fatalf("accepted bad name: %q %q %q", task.ID, task.Queue, task.Kind)
		}
		if !utf8.ValidString(task.IdempotencyKey) {
			t.Fatalf("accepted an idempotency key that is not UTF-8: %q", task.IdempotencyKey)
		}
		for k, v := range task.Attributes {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				t.Fatalf("accepted an attribute that is not UTF-8: %q=%q", k, v)
			}
		}
		if task.MaxAttempts < 1 || task.MaxAttempts > MaxAttemptsLimit {
			t.Fatalf("accepted max_attempts %d", task.MaxAttempts)
		}
		if y := task.RunAt.Year(); y < 1970 || y > 9999 {
			t.Fatalf("accepted run_at %v", task.RunAt)
		}
		if p.RunAt.IsZero() && task.RunAt.Before(now) {
			t.Fatalf("run_at %v before now without one given", task.RunAt)
		}
		if r := task.Retry; r != nil && len(r.Schedule) > 0 && (r.Base != 0 || r.Factor != 0 || r.Max != 0) {
			t.Fatalf("accepted a retry policy with a schedule and base/factor/max: %+v", r)
		}
		if task.State != bt.StatePending && task.State != bt.StateScheduled {
			t.Fatalf("state %s", task.State)
		}
	})
}

// FuzzRetryPolicyJSON: a stored or supplied policy never panics and, once
// validated, is one kind of policy (schedule or exponential) whose delays
// are never negative and never above max (times 1.5, the most jitter adds).
func FuzzRetryPolicyJSON(f *testing.F) {
	f.Add([]byte(`{"schedule":["1s","2s"]}`), 3)
	f.Add([]byte(`{"base":"1ms","factor":10,"max":"1h"}`), 40)
	f.Add([]byte(`{"base":-1}`), 1)
	f.Add([]byte(`{"schedule":["1s"],"base":"1s"}`), 1)
	f.Add([]byte(`{"base":"1h","max":"1m"}`), 2)
	f.Add([]byte(`{"base":7200000000000}`), 2)
	f.Add([]byte(`{"factor":1e308,"max":"9223372036854775807ns"}`), 999)
	f.Add([]byte(`{"jitter":false,"base":"1s"}`), 5)
	f.Fuzz(func(t *testing.T, data []byte, attempt int) {
		var p bt.RetryPolicy
		if json.Unmarshal(data, &p) != nil || p.Validate() != nil {
			return
		}
		if len(p.Schedule) > 0 && (p.Base != 0 || p.Factor != 0 || p.Max != 0) {
			t.Fatalf("%s: a schedule with base/factor/max validated", data)
		}
		base, maxD := cmp.Or(p.Base, bt.DefaultRetryPolicy.Base), cmp.Or(p.Max, bt.DefaultRetryPolicy.Max)
		if len(p.Schedule) == 0 && base > maxD {
			t.Fatalf("%s: base %s above max %s validated", data, base, maxD)
		}
		for _, rnd := range []float64{0, 0.5, 0.999999} {
			d := p.Delay(attempt%1000, rnd)
			if d < 0 {
				t.Fatalf("negative delay %s for %s attempt %d", d, data, attempt)
			}
			if len(p.Schedule) == 0 && float64(d) > 1.5*float64(maxD)+1 {
				t.Fatalf("delay %s above 1.5 x max %s for %s attempt %d", d, maxD, data, attempt)
			}
		}
	})
}
