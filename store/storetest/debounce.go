package storetest

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// testDebounce: a debounced enqueue replaces (or merges into) the waiting
// task of its key and delays it until the key is quiet, never past the
// maximum wait after the first enqueue; a running task is not touched (a
// new waiting task is made); each replacement is an event; concurrent
// enqueues of one key leave one waiting task at any time. On a frozen
// clock.
func (s *suite) testDebounce(t *testing.T) {
	t.Run("Quiet", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.clock.freeze()
		t0 := b.clock.Now()
		d := &backstop.Debounce{Key: "doc-1", For: 10 * time.Second}
		first := b.debounced(d, `{"v":0}`, false)
		eq(t, "first run_at", first.RunAt, t0.Add(10*time.Second))
		eq(t, "first state", first.State, backstop.StateScheduled)
		eq(t, "merge key", first.MergeKey, "doc-1")
		if got, err := b.c.Get(b.ctx, first.ID); err != nil || got.Debounce == nil ||
			*got.Debounce != (bt.TaskDebounce{Key: "doc-1", For: bt.Duration(10 * time.Second)}) {
			t.Fatalf("debounce without a max wait: %+v %v", got, err)
		}
		// Without a maximum wait, each enqueue inside the quiet period
		// pushes the task on, however long that goes.
		for i := 1; i <= 5; i++ {
			b.clock.Advance(8 * time.Second)
			got := b.debounced(d, `{"v":`+itoa(i)+`}`, true)
			eq(t, "merged into", got.ID, first.ID)
			eq(t, "run_at after enqueue "+itoa(i), got.RunAt, b.clock.Now().Add(10*time.Second))
			eq(t, "payload", compactJSON(t, got.Payload), `{"v":`+itoa(i)+`}`)
		}
		b.clock.Advance(9 * time.Second)
		b.promote()
		if ts := claim(t, b, "dq", 10); len(ts) != 0 {
			t.Fatalf("claimed %d tasks before the key was quiet", len(ts))
		}
		b.clock.Advance(time.Second)
		b.promote()
		ts := claim(t, b, "dq", 10)
		if len(ts) != 1 || ts[0].ID != first.ID || compactJSON(t, ts[0].Payload) != `{"v":5}` {
			t.Fatalf("claimed %d tasks, want the debounced task with the newest payload", len(ts))
		}
		eq(t, "tasks", b.count(), 1)
		// The history shows every replacement.
		evs, err := b.c.Events(b.ctx, first.ID)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range evs {
			if e.Type == "task.enqueued" && strings.Contains(string(e.Body), `"debounced":true`) {
				n++
			}
		}
		eq(t, "debounced events", n, 5)
	})

	t.Run("MaxWait", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.clock.freeze()
		t0 := b.clock.Now()
		d := &backstop.Debounce{Key: "doc-2", For: 10 * time.Second, MaxWait: 30 * time.Second}
		first := b.debounced(d, `{"v":0}`, false)
		// The task says how it is debounced: key, quiet period, the time
		// it runs at the latest.
		checkDebounce := func(what string, want bt.TaskDebounce) {
			t.Helper()
			got, err := b.c.Get(b.ctx, first.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Debounce == nil {
				t.Fatalf("%s: no debounce on the task", what)
			}
			eq(t, what+": debounce", *got.Debounce, want)
		}
		// A plain merge key is not a debounce.
		plain := b.enqueue(backstop.EnqueueParams{Queue: "pq", Kind: "other", MergeKey: "m"})
		if got, err := b.c.Get(b.ctx, plain.ID); err != nil || got.Debounce != nil {
			t.Fatalf("a merge key's task: debounce %+v (%v), want none", got.Debounce, err)
		}
		latest := t0.Add(30 * time.Second)
		checkDebounce("first enqueue", bt.TaskDebounce{Key: "doc-2", For: bt.Duration(10 * time.Second), MaxWaitUntil: &latest})
		for _, c := range []struct {
			at, want time.Duration
		}{{8, 18}, {16, 26}, {24, 30}, {29, 30}} {
			b.clock.Advance(t0.Add(c.at * time.Second).Sub(b.clock.Now()))
			got := b.debounced(d, `{"v":1}`, true)
			eq(t, "run_at at +"+c.at.String(), got.RunAt, t0.Add(c.want*time.Second))
			eq(t, "state", got.State, backstop.StateScheduled)
			eq(t, "id", got.ID, first.ID)
		}
		// A later enqueue's quiet period is the one shown; the deadline
		// stays the first enqueue's plus its max wait.
		b.debounced(&backstop.Debounce{Key: "doc-2", For: 20 * time.Second, MaxWait: 40 * time.Second}, `{"v":1}`, true)
		later := t0.Add(40 * time.Second)
		checkDebounce("a later enqueue", bt.TaskDebounce{Key: "doc-2", For: bt.Duration(20 * time.Second), MaxWaitUntil: &later})
		b.debounced(d, `{"v":1}`, true)
		// Due at its maximum wait: a later enqueue leaves it due (pending).
		b.clock.Advance(t0.Add(31 * time.Second).Sub(b.clock.Now()))
		got := b.debounced(d, `{"v":2}`, true)
		eq(t, "run_at past the max wait", got.RunAt, t0.Add(30*time.Second))
		eq(t, "state past the max wait", got.State, backstop.StatePending)
		ts := claim(t, b, "dq", 10)
		if len(ts) != 1 || compactJSON(t, ts[0].Payload) != `{"v":2}` {
			t.Fatalf("claimed %d tasks, want the one debounced task with the newest payload", len(ts))
		}
	})

	t.Run("AcrossARunningTask", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		b.clock.freeze()
		d := &backstop.Debounce{Key: "doc-3", For: 5 * time.Second}
		first := b.debounced(d, `{"v":1}`, false)
		b.clock.Advance(5 * time.Second)
		b.promote()
		if ts := claim(t, b, "dq", 1); len(ts) != 1 || ts[0].ID != first.ID {
			t.Fatalf("claim: %d tasks", len(ts))
		}
		// The running task is not touched: a new waiting task is made,
		// and later enqueues debounce into it.
		second := b.debounced(d, `{"v":2}`, false)
		if second.ID == first.ID {
			t.Fatal("a debounced enqueue merged into a running task")
		}
		b.clock.Advance(time.Second)
		third := b.debounced(d, `{"v":3}`, true)
		eq(t, "merged into the new task", third.ID, second.ID)
		eq(t, "running task's payload", compactJSON(t, b.get(first.ID).Payload), `{"v":1}`)
		eq(t, "running task's state", b.get(first.ID).State, backstop.StateRunning)
	})

	t.Run("MergeRule", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, &backstop.Config{Kinds: map[string]backstop.KindConfig{"dk": {MergeRule: backstop.MergeAppend}}})
		b.clock.freeze()
		d := &backstop.Debounce{Key: "doc-4", For: time.Second}
		b.debounced(d, `{"v":1}`, false)
		got := b.debounced(d, `{"v":2}`, true)
		eq(t, "appended payload", compactJSON(t, got.Payload), `[{"v":1},{"v":2}]`)
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		for _, c := range []struct {
			field string
			p     backstop.EnqueueParams
		}{
			{"debounce.key", backstop.EnqueueParams{Debounce: &backstop.Debounce{For: time.Second}}},
			{"debounce.for", backstop.EnqueueParams{Debounce: &backstop.Debounce{Key: "k"}}},
			{"debounce.for", backstop.EnqueueParams{Debounce: &backstop.Debounce{Key: "k", For: -time.Second}}},
			{"debounce.max_wait", backstop.EnqueueParams{Debounce: &backstop.Debounce{Key: "k", For: time.Minute, MaxWait: time.Second}}},
			{"debounce.max_wait", backstop.EnqueueParams{Debounce: &backstop.Debounce{Key: "k", For: time.Second, MaxWait: -time.Second}}},
			{"merge_key", backstop.EnqueueParams{MergeKey: "other", Debounce: &backstop.Debounce{Key: "k", For: time.Second}}},
			{"debounce", backstop.EnqueueParams{Delay: time.Second, Debounce: &backstop.Debounce{Key: "k", For: time.Second}}},
		} {
			c.p.Queue, c.p.Kind = "dq", "dk"
			_, err := b.c.Enqueue(b.ctx, c.p)
			var ve *backstop.ValidationError
			if !errors.As(err, &ve) || ve.Field != c.field {
				t.Errorf("%+v: %v, want a validation error naming %s", c.p.Debounce, err, c.field)
			}
		}
		eq(t, "tasks written", b.count(), 0)
	})

	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		d := &backstop.Debounce{Key: "hot", For: time.Minute}
		const perGoroutine = 40
		var wg sync.WaitGroup
		var stop atomic.Bool
		var most atomic.Int64
		sampled := make(chan struct{})
		go func() { // one waiting task at any time
			defer close(sampled)
			for !stop.Load() {
				ts, err := b.store.List(b.ctx, store.ListFilter{Queue: "dq",
					States: []backstop.State{backstop.StateScheduled, backstop.StatePending}, Limit: 100})
				if err != nil {
					t.Error(err)
					return
				}
				if n := int64(len(ts)); n > most.Load() {
					most.Store(n)
				}
			}
		}()
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perGoroutine {
					_, err := b.c.Enqueue(b.ctx, backstop.EnqueueParams{Queue: "dq", Kind: "dk",
						Payload: json.RawMessage(`{"g":` + itoa(g) + `,"i":` + itoa(i) + `}`), Debounce: d})
					if err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		stop.Store(true)
		<-sampled
		eq(t, "most waiting tasks seen at once", most.Load(), int64(1))
		ts, err := b.store.List(b.ctx, store.ListFilter{Queue: "dq", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "tasks", len(ts), 1)
		eq(t, "merges", ts[0].MergeCount, 2*perGoroutine-1)
	})
}

// debounced enqueues a debounced task of kind dk on queue dq and checks
// whether it merged.
func (b *bundle) debounced(d *backstop.Debounce, payload string, merged bool) *backstop.Task {
	b.t.Helper()
	r, err := b.c.Enqueue(b.ctx, backstop.EnqueueParams{Queue: "dq", Kind: "dk", Payload: json.RawMessage(payload), Debounce: d})
	if err != nil {
		b.t.Fatalf("debounced enqueue: %v", err)
	}
	if r.Merged != merged {
		b.t.Fatalf("debounced enqueue %s: merged %v, want %v", payload, r.Merged, merged)
	}
	return r.Task
}

// promote makes the due scheduled tasks pending.
func (b *bundle) promote() {
	b.t.Helper()
	if _, err := b.store.PromoteScheduled(b.ctx, b.clock.Now(), 1000); err != nil {
		b.t.Fatal(err)
	}
}

func compactJSON(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("payload %s: %v", raw, err)
	}
	out, _ := json.Marshal(v)
	return string(out)
}
