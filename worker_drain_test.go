package backstop

import (
	"context"
	"sync"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
)

// heldClaim is a REAL store whose first claim that leases tasks holds its
// answer, after the claim committed, until the worker is marked stopping
// (the first thing Stop does, before it ends the claiming), and fails as a
// real claim would if the drain cut its context meanwhile: the drain of an
// in-process worker meets a claim whose rows are on their way.
type heldClaim struct {
	store.Store
	once     sync.Once
	held     chan struct{} // closed once a claim has leased tasks and holds them
	stopping chan struct{} // closed when the worker is marked stopping
	stopOnce sync.Once
}

func (h *heldClaim) Claim(ctx context.Context, p store.ClaimParams) ([]*bt.Task, error) {
	ts, err := h.Store.Claim(ctx, p)
	if err == nil && len(ts) > 0 {
		first := false
		h.once.Do(func() { first = true })
		if first {
			close(h.held)
			<-h.stopping
			// Stop ends the claiming right after: a claim cut off by it
			// loses its answer as a real one would (the commit's reply
			// lost with the connection).
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return ts, err
}

func (h *heldClaim) SetWorkerState(ctx context.Context, id string, st store.WorkerState, now time.Time) error {
	if st == store.WorkerStopping {
		h.stopOnce.Do(func() { close(h.stopping) })
	}
	return h.Store.SetWorkerState(ctx, id, st, now)
}

// TestWorkerDrainMidClaim: an in-process worker drained while its claim's
// answer is on its way (the claim committed) works or releases every task
// that claim leased: none is left running for its lease to expire. With a
// handler that outlives the grace, each ends pending, uncharged, its
// execution released; with a quick one, succeeded.
func TestWorkerDrainMidClaim(t *testing.T) {
	t.Parallel()
	for _, db := range []struct {
		name string
		url  func(testing.TB) string
	}{{"sqlite", testdb.SQLite}, {"postgres", testdb.Postgres}} {
		for _, slow := range []bool{false, true} {
			name := db.name + "/quick"
			if slow {
				name = db.name + "/slow"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				s := migratedStore(t, db.url(t))
				h := &heldClaim{Store: s, held: make(chan struct{}), stopping: make(chan struct{})}
				c, err := NewClient(h, nil)
				if err != nil {
					t.Fatal(err)
				}
				ps := make([]EnqueueParams, 5)
				for i := range ps {
					ps[i] = EnqueueParams{Queue: "dm", Kind: "k", MaxAttempts: 3}
				}
				res, err := c.EnqueueMany(ctx, ps)
				if err != nil {
					t.Fatal(err)
				}
				w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"dm": 5}, MaintenanceInterval: -1})
				if err != nil {
					t.Fatal(err)
				}
				release := make(chan struct{})
				defer close(release)
				w.Handle("k", HandlerFunc(func(ctx context.Context, _ *Task) error {
					if slow {
						select {
						case <-ctx.Done():
							return ctx.Err()
						case <-release:
						}
					}
					return nil
				}))
				if err := w.Start(ctx); err != nil {
					t.Fatal(err)
				}
				select {
				case <-h.held:
				case <-time.After(30 * time.Second):
					t.Fatal("no claim leased the tasks")
				}
				grace, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				defer cancel()
				if err := w.Stop(grace); err != nil {
					t.Fatal(err)
				}
				for _, r := range res {
					v, err := c.Get(ctx, r.Task.ID)
					if err != nil {
						t.Fatal(err)
					}
					ex := v.Executions
					ok := len(ex) == 1
					if slow {
						ok = ok && v.State == bt.StatePending && v.Attempt == 0 && ex[0].Outcome == bt.OutcomeReleased
					} else {
						ok = ok && v.State == bt.StateSucceeded && v.Attempt == 1 && ex[0].Outcome == bt.OutcomeSucceeded
					}
					if !ok {
						t.Fatalf("task %s after the drain: state %s attempt %d executions %+v", v.ID, v.State, v.Attempt, ex)
					}
				}
			})
		}
	}
}
