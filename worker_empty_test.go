package backstop

import (
	"context"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// A worker with WatchEmpty closes Empty once its queues are dry: after
// every task it claimed has finished and been handed to settlement, and a
// task scheduled for later does not hold it open. Stop then writes every
// settlement. Without WatchEmpty, Empty is nil.
func TestWorkerWatchEmpty(t *testing.T) {
	forEachStoreClient(t, func() *Config { return nil }, func(t *testing.T, c *Client) {
		ctx := context.Background()
		ps := make([]EnqueueParams, 6)
		for i := range ps {
			ps[i] = EnqueueParams{Queue: "we", Kind: "k"}
		}
		ps[5].RunAt = time.Now().Add(time.Hour)
		if _, err := c.EnqueueMany(ctx, ps); err != nil {
			t.Fatal(err)
		}
		plain, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"we": 2}, MaintenanceInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		if plain.Empty() != nil {
			t.Fatal("Empty is not nil without WatchEmpty")
		}
		w, err := NewWorker(c, &WorkerConfig{Queues: map[string]int{"we": 2}, MaintenanceInterval: -1, WatchEmpty: true})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("k", HandlerFunc(func(ctx context.Context, tk *Task) error { return nil }))
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-w.Empty():
		case <-time.After(30 * time.Second):
			t.Fatal("Empty did not close after the queue was drained")
		}
		if n := w.Running(); n != 0 {
			t.Fatalf("Empty closed with %d attempts running", n)
		}
		stop, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := w.Stop(stop); err != nil {
			t.Fatal(err)
		}
		ts, err := c.List(ctx, ListParams{Queue: "we", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		counts := map[bt.State]int{}
		for _, x := range ts {
			counts[x.State]++
		}
		if counts[bt.StateSucceeded] != 5 || counts[bt.StateScheduled] != 1 {
			t.Fatalf("states after Stop: %v, want 5 succeeded and 1 scheduled", counts)
		}
	})
}
