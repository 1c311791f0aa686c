package backstop_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store/pgstore"
)

// TestSubscribeSurvivesPostgresRestart: a subscription following a stream
// outlives a restart of the Postgres server (its connections terminated,
// "terminating connection due to administrator command"): it reconnects
// with backoff and resumes after the last event it delivered, so the
// events enqueued after the restart all arrive, none twice, none skipped.
func TestSubscribeSurvivesPostgresRestart(t *testing.T) {
	t.Parallel()
	pg := testdb.OwnPostgres(t)
	ctx := context.Background()
	s, err := pgstore.Open(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := backstop.NewClient(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := backstop.SubscribeParams{PollInterval: 20 * time.Millisecond}
	p.Stream = "queue.follow"
	sub, err := c.Subscribe(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	seen := map[string]bool{}
	var order []string
	receive := func(n int) {
		t.Helper()
		deadline := time.After(60 * time.Second)
		for len(order) < n {
			select {
			case e, ok := <-sub.C:
				if !ok {
					t.Fatalf("the subscription ended after %d events: %v", len(order), sub.Err())
				}
				if seen[e.Subject] {
					t.Fatalf("event of %s delivered twice", e.Subject)
				}
				seen[e.Subject] = true
				order = append(order, e.Subject)
			case <-deadline:
				t.Fatalf("%d of %d events after a minute (%v)", len(order), n, order)
			}
		}
	}
	enqueue := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			testdb.Retry(t, func() error {
				_, err := c.Enqueue(ctx, backstop.EnqueueParams{ID: fmt.Sprintf("f%02d", i), Queue: "follow", Kind: "k"})
				return err
			})
		}
	}
	enqueue(0, 5)
	receive(5)
	pg.Restart()
	// The subscription's next polls fail while the server restarts and
	// after (the pool's connections were terminated); enqueue on a pool
	// that reconnects.
	enqueue(5, 10)
	receive(10)
	for i, id := range order {
		if want := fmt.Sprintf("f%02d", i); id != want {
			t.Fatalf("event %d is %s, want %s (order %v)", i, id, want, order)
		}
	}
	if err := sub.Err(); err != nil {
		t.Fatalf("Err: %v", err)
	}
}
