package maintenance_test

import (
	"fmt"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
)

// TestPromoter: a scheduled task becomes pending once its run_at has come,
// not before; one round promotes every due task, however many batches of
// maintenance.Batch that takes; a task due later stays scheduled.
func TestPromoter(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		b := setup(t, db, nil)
		params := make([]engine.EnqueueParams, maintenance.Batch+1)
		for i := range params {
			params[i] = engine.EnqueueParams{ID: fmt.Sprintf("due-%04d", i), Queue: "q", Kind: "k", Delay: 10 * time.Second}
		}
		b.enqueue(params...)
		b.enqueue(engine.EnqueueParams{ID: "later", Queue: "q", Kind: "k", Delay: time.Hour})
		count := func(st bt.State) int {
			t.Helper()
			ts, err := b.s.List(b.ctx, store.ListFilter{Queue: "q", States: []bt.State{st}, Limit: 2 * maintenance.Batch, WithoutPayload: true})
			if err != nil {
				t.Fatal(err)
			}
			return len(ts)
		}

		svc := maintenance.NewPromoter(b.s, b.e.Now, time.Second)
		b.clock.Advance(10*time.Second - time.Microsecond)
		b.run(svc)
		eq(t, "pending before run_at", count(bt.StatePending), 0)

		b.clock.Advance(time.Microsecond)
		b.run(svc)
		eq(t, "pending at run_at", count(bt.StatePending), maintenance.Batch+1)
		eq(t, "later", b.get("later").State, bt.StateScheduled)
		if got := b.claim("q", 1, time.Minute); len(got) != 1 || got[0].ID != "due-0000" {
			t.Fatalf("claimed %v, want due-0000 (promoted tasks are claimable)", got)
		}
	})
}
