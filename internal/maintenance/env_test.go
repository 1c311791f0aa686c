package maintenance_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/internal/testclock"
	"github.com/backstophq/backstop/store"
)

// bundle is an engine over a real, migrated store, on a stopped clock
// that only the test moves.
type bundle struct {
	t     *testing.T
	ctx   context.Context
	s     store.Store
	e     *engine.Engine
	clock *testclock.Clock
}

// setup opens the store db names and makes an engine over it with cfg
// (nil: defaults) on a test clock.
func setup(t *testing.T, db string, cfg *engine.Config) *bundle {
	t.Helper()
	ctx := context.Background()
	s, err := dburl.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if cfg == nil {
		cfg = &engine.Config{}
	}
	clock := testclock.New()
	cfg.Clock = clock
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	e, err := engine.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{t: t, ctx: ctx, s: s, e: e, clock: clock}
}

// enqueue writes tasks as the library's Enqueue does.
func (b *bundle) enqueue(params ...engine.EnqueueParams) []*bt.Task {
	b.t.Helper()
	tasks, err := b.e.PrepareAll(params)
	if err != nil {
		b.t.Fatal(err)
	}
	rs, err := b.s.Enqueue(b.ctx, tasks, b.e.EnqueueOpts(b.ctx, params, tasks))
	if err != nil {
		b.t.Fatal(err)
	}
	out := make([]*bt.Task, len(rs))
	for i, r := range rs {
		out[i] = r.Task
	}
	return out
}

// claim leases up to max claimable tasks of queue through the engine's
// one claim path.
func (b *bundle) claim(queue string, max int, lease time.Duration) []*bt.Task {
	b.t.Helper()
	ts, bad, err := b.e.Claim(b.ctx, engine.ClaimParams{Queue: queue, WorkerID: "w1", Max: max, Lease: lease})
	if err != nil || len(bad) > 0 {
		b.t.Fatalf("claim %s: %v %v", queue, bad, err)
	}
	return ts
}

// succeed settles a claimed attempt as succeeded now.
func (b *bundle) succeed(t *bt.Task) {
	b.t.Helper()
	oks, err := b.e.Settle(b.ctx, []store.Settlement{{TaskID: t.ID, ExecutionID: t.ExecutionID,
		FinishedAt: b.clock.Now(), Outcome: bt.OutcomeSucceeded, State: bt.StateSucceeded}})
	if err != nil || !oks[0] {
		b.t.Fatalf("settle %s: %v %v", t.ID, oks, err)
	}
}

func (b *bundle) get(id string) *bt.Task {
	b.t.Helper()
	t, err := b.s.Get(b.ctx, id)
	if err != nil {
		b.t.Fatalf("get %s: %v", id, err)
	}
	return t
}

// executions are a task's attempts, in order.
func (b *bundle) executions(id string) []bt.Execution {
	b.t.Helper()
	exs, err := b.s.Executions(b.ctx, id)
	if err != nil {
		b.t.Fatal(err)
	}
	return exs
}

// run runs one round of svc, which must succeed.
func (b *bundle) run(svc maintenance.Service) {
	b.t.Helper()
	if err := svc.RunOnce(b.ctx); err != nil {
		b.t.Fatalf("%s: %v", svc.Name(), err)
	}
}

// states are the tasks' states by id.
func (b *bundle) states(ids ...string) map[string]bt.State {
	b.t.Helper()
	out := map[string]bt.State{}
	for _, id := range ids {
		out[id] = b.get(id).State
	}
	return out
}

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}
