package maintenance_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// TestLostWorkers: a registered worker not seen for workers.stale_after
// gets one worker.heartbeat_lost however many rounds run; a worker seen
// within it, and a stopped one, get none; seen again and silent again, the
// worker gets another.
func TestLostWorkers(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		const stale = 90 * time.Second // not the default
		b := setup(t, db, &engine.Config{WorkerStaleAfter: stale})
		for _, id := range []string{"silent", "alive", "stopped"} {
			if err := b.s.RegisterWorker(b.ctx, store.WorkerInfo{ID: id, Host: "node-" + id, Queues: []string{"q"}, StartedAt: b.clock.Now()}); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.s.SetWorkerState(b.ctx, "stopped", store.WorkerStopped, b.clock.Now()); err != nil {
			t.Fatal(err)
		}
		// lost waits until the log's final prefix holds silent
		// worker.heartbeat_lost events of "silent" and counts those of every
		// worker read up to there (an event is served once everything
		// before it is final, so the count of the others is exact too).
		lost := func(silent int) map[string]int {
			t.Helper()
			var n map[string]int
			testwait.For(t, fmt.Sprintf("%d heartbeat_lost of silent", silent), func() bool {
				n = map[string]int{}
				for after := ""; ; {
					page, err := b.s.ReadEvents(b.ctx, store.EventQuery{After: after, Limit: store.MaxEventLimit})
					if err != nil {
						t.Fatal(err)
					}
					for _, e := range page.Events {
						if e.Type != store.EventWorkerHeartbeatLost {
							continue
						}
						n[e.Subject]++
						var body map[string]any
						if err := json.Unmarshal(e.Body, &body); err != nil || body["stale_after_ms"] != float64(stale.Milliseconds()) {
							t.Fatalf("%s: heartbeat_lost body %s (%v)", e.Subject, e.Body, err)
						}
					}
					if page.Next == after {
						return n["silent"] >= silent
					}
					after = page.Next
				}
			})
			return n
		}
		svc := maintenance.NewLostWorkers(b.e, time.Second)

		// Seen exactly stale_after ago: not lost (alive, marked here, would
		// count twice below).
		b.clock.Advance(stale)
		b.run(svc)
		if err := b.s.TouchWorkers(b.ctx, []string{"alive"}, b.clock.Now()); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(time.Second)
		for range 3 {
			b.run(svc)
		}
		if got := lost(1); !maps.Equal(got, map[string]int{"silent": 1}) {
			t.Fatalf("past stale_after: heartbeat_lost by worker %v, want silent once", got)
		}

		// Seen again, then silent for stale_after again: a second loss.
		if err := b.s.TouchWorkers(b.ctx, []string{"silent"}, b.clock.Now()); err != nil {
			t.Fatal(err)
		}
		b.run(svc)
		b.clock.Advance(stale + time.Second)
		b.run(svc)
		b.run(svc)
		// alive, last seen stale_after+2s ago now, is lost too; stopped
		// never is.
		if got := lost(2); !maps.Equal(got, map[string]int{"silent": 2, "alive": 1}) {
			t.Fatalf("silent again: heartbeat_lost by worker %v, want silent twice, alive once", got)
		}
	})
}
