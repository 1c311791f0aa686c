package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testclock"
	"github.com/backstophq/backstop/store"
)

// TestActivity: `backstop activity` prints the activity rollup a
// maintenance pass wrote (as a table, and every bucket with -o json), of
// one queue when asked; a bad window or queue is exit 2 naming it.
func TestActivity(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		ctx := context.Background()
		s, err := dburl.Open(ctx, e.db)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		// Work finished a minute ago, past the rollup's settle time.
		clk := testclock.At(time.Now().Add(-time.Minute))
		c, err := backstop.NewClient(s, &backstop.Config{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{"mail", "mail", "etl"} {
			if _, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: q, Kind: "send"}); err != nil {
				t.Fatal(err)
			}
			got, err := s.Claim(ctx, store.ClaimParams{Queue: q, WorkerID: "w", Max: 1, Now: clk.Now(), Lease: time.Minute})
			if err != nil || len(got) != 1 {
				t.Fatalf("claim: %v %v", got, err)
			}
			if _, err := s.Settle(ctx, []store.Settlement{{TaskID: got[0].ID, ExecutionID: got[0].ExecutionID,
				Outcome: bt.OutcomeSucceeded, FinishedAt: clk.Now().Add(2 * time.Second), State: bt.StateSucceeded}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := backstop.Maintain(ctx, e.client()); err != nil {
			t.Fatal(err)
		}
		var rep backstop.ActivityReport
		e.json(&rep, "activity", "--window", "24h")
		if rep.Window != "24h" || len(rep.Series) != 288 || rep.Totals.Succeeded != 3 || len(rep.Groups) != 2 || rep.RolledUpTo == nil {
			t.Fatalf("activity -o json: %s, %d points, totals %+v, %d groups", rep.Window, len(rep.Series), rep.Totals, len(rep.Groups))
		}
		out := e.ok("activity", "--window", "7d", "--queue", "mail")
		if !strings.Contains(out, "window 7d") || !strings.Contains(out, "mail") || strings.Contains(out, "etl") ||
			!strings.Contains(out, "(all)  ") {
			t.Fatalf("activity --window 7d --queue mail:\n%s", out)
		}
		e.fails(ExitUsage, "--window", "activity", "--window", "1h")
		e.fails(ExitUsage, "queue", "activity", "--queue", "no such queue")
	})
}
