package cli

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
)

// TestDemoReplayerReplaysEachDeadLetterOnce: the demo's background replayer
// replays every dead letter once, in id order: one that fails for good dies
// again and stays dead (it is not replayed on every round for as long as the
// demo runs), and the dead letters after it get their turn.
func TestDemoReplayerReplaysEachDeadLetterOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := dburl.Open(ctx, testdb.SQLite(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := backstop.NewClient(s, &backstop.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w, err := backstop.NewWorker(c, &backstop.WorkerConfig{ID: "demo-test", Queues: map[string]int{demoQueue: 2},
		PollInterval: 20 * time.Millisecond, MaintenanceInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("always_fails", backstop.HandlerFunc(func(context.Context, *backstop.Task) error {
		return backstop.Permanent(errors.New("card declined"))
	}))
	w.Handle("fails_until_replayed", backstop.HandlerFunc(func(_ context.Context, tk *backstop.Task) error {
		if tk.ReplayCount == 0 {
			return backstop.Permanent(errors.New("not yet"))
		}
		return nil
	}))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background()) //nolint:errcheck
	// The always-failing one first: the lowest id, the first a listing finds.
	var ids []string
	for _, kind := range []string{"always_fails", "fails_until_replayed"} {
		r, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: demoQueue, Kind: kind})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.Task.ID)
	}
	get := func(id string) *backstop.Task {
		tk, err := c.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	testwait.For(t, "both dead", func() bool {
		return get(ids[0]).State == backstop.StateDead && get(ids[1]).State == backstop.StateDead
	})

	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); demoReplay(rctx, c, slog.New(slog.DiscardHandler), 10*time.Millisecond) }()
	defer func() { stop(); <-done }()
	testwait.For(t, "the second dead letter replayed and run", func() bool {
		return get(ids[1]).State == backstop.StateSucceeded
	})
	testwait.For(t, "the always-failing one dead again", func() bool {
		tk := get(ids[0])
		return tk.State == backstop.StateDead && tk.ReplayCount == 1
	})
	// A later dead letter replayed proves a round passed over the first one:
	// a round replays the lowest open dead letter it may, and the first is
	// lower.
	later, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: demoQueue, Kind: "always_fails"})
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "a later dead letter replayed and dead again", func() bool {
		tk := get(later.Task.ID)
		return tk.State == backstop.StateDead && tk.ReplayCount == 1
	})
	if tk := get(ids[0]); tk.ReplayCount != 1 || tk.State != backstop.StateDead {
		t.Errorf("the always-failing dead letter: state %s, replayed %d times; want dead, replayed once", tk.State, tk.ReplayCount)
	}
	if n := len(get(ids[0]).Executions); n != 2 {
		t.Errorf("the always-failing dead letter ran %d times, want 2 (its first run and one replay)", n)
	}
}
