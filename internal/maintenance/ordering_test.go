package maintenance_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/internal/testdb"
)

// TestOrderingDrains: on every configured ordered queue, with no worker
// claiming, a round admits a key's next task and a task buffered behind a
// gap stays buffered until the drain's backoff is used up; then a round
// releases it, its gap reported.
func TestOrderingDrains(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		ord := engine.QueueConfig{Ordering: engine.OrderingConfig{Enabled: true, Step: 1, Backoff: []time.Duration{time.Second}}}
		queues := []string{"oa", "ob"}
		b := setup(t, db, &engine.Config{Queues: map[string]engine.QueueConfig{"oa": ord, "ob": ord}})
		svc := maintenance.NewOrderingDrains(b.e, time.Second)
		enqueue := func(q string, seq int64) string {
			t.Helper()
			id := fmt.Sprintf("%s-%d", q, seq)
			b.enqueue(engine.EnqueueParams{ID: id, Queue: q, Kind: "k", OrderingKey: "key", Sequence: seq})
			return id
		}
		states := func(seq int64) []bt.State {
			t.Helper()
			var out []bt.State
			for _, q := range queues {
				out = append(out, b.get(fmt.Sprintf("%s-%d", q, seq)).State)
			}
			return out
		}

		for _, q := range queues {
			enqueue(q, 1)
		}
		b.run(svc)
		if got := states(1); !slices.Equal(got, []bt.State{bt.StatePending, bt.StatePending}) {
			t.Fatalf("first of each key after a round: %v, want pending", got)
		}
		for _, q := range queues {
			ts := b.claim(q, 10, time.Minute)
			if len(ts) != 1 {
				t.Fatalf("%s: claimed %d, want 1", q, len(ts))
			}
			b.succeed(ts[0])
			enqueue(q, 3) // 2 never arrives
		}

		b.run(svc)
		b.clock.Advance(time.Second - time.Microsecond)
		b.run(svc)
		if got := states(3); !slices.Equal(got, []bt.State{bt.StateBuffered, bt.StateBuffered}) {
			t.Fatalf("behind the gap, within the backoff: %v, want buffered", got)
		}

		b.clock.Advance(time.Second)
		b.run(svc)
		if got := states(3); !slices.Equal(got, []bt.State{bt.StatePending, bt.StatePending}) {
			t.Fatalf("behind the gap, backoff used up: %v, want pending (released)", got)
		}
		for _, q := range queues {
			ts := b.claim(q, 10, time.Minute)
			if len(ts) != 1 || ts[0].Sequence != 3 || !slices.Equal(ts[0].Gaps, []bt.Gap{{From: 2, To: 2}}) {
				t.Fatalf("%s: claimed %+v, want sequence 3 with the gap 2..2", q, ts)
			}
		}
	})
}
