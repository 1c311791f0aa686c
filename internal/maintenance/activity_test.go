package maintenance_test

import (
	"errors"
	"math"
	"testing"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/activity"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
)

// TestActivityRollup: the rollup counts, per bucket × queue × kind, the
// tasks that succeeded, the attempts that failed (retried: those the task
// outlived) and the tasks that died, in five-minute and hourly rows, with
// wait and run histograms whose percentiles merge; a round again, or a
// stale round, adds nothing twice; work finished later adds to the same
// rows; work finished less than ActivitySettle ago waits for the next
// round; rows past their resolution's keep are deleted.
func TestActivityRollup(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		b := setup(t, db, nil)
		// Start 30 s into a five-minute bucket.
		now := b.clock.Now()
		bucket := now.Truncate(activity.Fine.Width).Add(activity.Fine.Width)
		b.clock.Advance(bucket.Sub(now) + 30*time.Second)
		svc := maintenance.NewActivity(b.s, b.e.Now, time.Second)

		b.enqueue(engine.EnqueueParams{ID: "a", Queue: "q", Kind: "k"}, engine.EnqueueParams{ID: "b", Queue: "q", Kind: "k"},
			engine.EnqueueParams{ID: "c", Queue: "q", Kind: "k", MaxAttempts: 1}, engine.EnqueueParams{ID: "d", Queue: "r", Kind: "j"})
		b.clock.Advance(2 * time.Second) // waited 2 s
		q := b.claim("q", 3, time.Minute)
		r := b.claim("r", 1, time.Minute)
		b.clock.Advance(3 * time.Second) // ran 3 s
		b.succeed(q[0])
		b.succeed(q[1])
		settle := func(task *bt.Task, s store.Settlement) {
			t.Helper()
			s.TaskID, s.ExecutionID, s.FinishedAt, s.Error = task.ID, task.ExecutionID, b.clock.Now(), "boom"
			if oks, err := b.e.Settle(b.ctx, []store.Settlement{s}); err != nil || !oks[0] {
				t.Fatalf("settle %s: %v %v", task.ID, oks, err)
			}
		}
		settle(q[2], store.Settlement{Outcome: bt.OutcomePermanentError, State: bt.StateDead, DeadReason: bt.ReasonPermanentError})
		settle(r[0], store.Settlement{Outcome: bt.OutcomeTransientError, State: bt.StateScheduled, RunAt: b.clock.Now().Add(time.Minute)})

		rows := func(width time.Duration) map[string]store.ActivityRow {
			t.Helper()
			rs, err := b.s.ReadActivity(b.ctx, width, bucket.Add(-24*time.Hour), bucket.Add(24*time.Hour), "", "")
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]store.ActivityRow{}
			for _, r := range rs {
				if want := bucket.Truncate(width); !r.Bucket.Equal(want) {
					t.Fatalf("row %+v: bucket %s, want %s", r, r.Bucket, want)
				}
				out[r.Queue+"/"+r.Kind] = r
			}
			return out
		}
		counts := func(r store.ActivityRow) [4]int64 { return [4]int64{r.Succeeded, r.Failed, r.Retried, r.Dead} }

		// Finished less than ActivitySettle ago: not yet.
		b.run(svc)
		eq(t, "rows before the settle time", len(rows(activity.Fine.Width)), 0)
		b.clock.Advance(maintenance.ActivitySettle + time.Second)
		b.run(svc)
		for _, w := range []time.Duration{activity.Fine.Width, activity.Coarse.Width} {
			got := rows(w)
			eq(t, "rows", len(got), 2)
			eq(t, w.String()+" q/k succeeded, failed, retried, dead", counts(got["q/k"]), [4]int64{2, 1, 0, 1})
			eq(t, w.String()+" r/j succeeded, failed, retried, dead", counts(got["r/j"]), [4]int64{0, 1, 1, 0})
		}
		near := func(what string, got *float64, want float64) {
			t.Helper()
			if got == nil || *got < want/math.Sqrt2 || *got > want*math.Sqrt2 {
				t.Fatalf("%s: %v ms, want %v ms within √2", what, got, want)
			}
		}
		report := func(window string) *activity.Report {
			t.Helper()
			w, err := activity.ParseWindow(window)
			if err != nil {
				t.Fatal(err)
			}
			from, until := w.Range(b.clock.Now())
			rs, err := b.s.ReadActivity(b.ctx, w.Res.Width, from, until, "", "")
			if err != nil {
				t.Fatal(err)
			}
			return activity.Build(w, b.clock.Now(), "", "", rs, nil)
		}
		for _, window := range []string{"24h", "7d"} {
			rep := report(window)
			tot := rep.Totals
			eq(t, window+" totals", [4]int64{tot.Succeeded, tot.Failed, tot.Retried, tot.Dead}, [4]int64{2, 2, 1, 1})
			eq(t, window+" failure rate", *tot.FailureRate, 0.5)
			near(window+" wait p50", tot.WaitP50, 2000)
			near(window+" wait p95", tot.WaitP95, 2000)
			near(window+" run p50", tot.RunP50, 3000)
			eq(t, window+" groups", len(rep.Groups), 2)
		}
		eq(t, "24h points", len(report("24h").Series), 288)
		eq(t, "7d points", len(report("7d").Series), 168)

		// Again: nothing is added twice; a stale round adds nothing.
		b.run(svc)
		eq(t, "q/k after a second round", counts(rows(activity.Fine.Width)["q/k"]), [4]int64{2, 1, 0, 1})
		wm, ok, err := b.s.ActivityWatermark(b.ctx)
		if err != nil || !ok {
			t.Fatalf("watermark: %v %v", ok, err)
		}
		eq(t, "watermark", wm.Equal(b.clock.Now().Add(-maintenance.ActivitySettle).Truncate(time.Second)), true)
		stale := []store.ActivityRow{{Width: activity.Fine.Width, Bucket: bucket, Queue: "q", Kind: "k", Succeeded: 5}}
		if err := b.s.AddActivity(b.ctx, wm.Add(-time.Second), wm.Add(time.Minute), stale); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("stale round: %v, want ErrConflict", err)
		}
		if err := b.s.AddActivity(b.ctx, time.Time{}, wm.Add(time.Minute), stale); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("a second first round: %v, want ErrConflict", err)
		}
		eq(t, "q/k after stale rounds", counts(rows(activity.Fine.Width)["q/k"]), [4]int64{2, 1, 0, 1})

		// The retry succeeds later in the same bucket: added to r/j.
		b.clock.Advance(time.Minute)
		b.run(maintenance.NewPromoter(b.s, b.e.Now, time.Second))
		d := b.claim("r", 1, time.Minute)
		b.clock.Advance(time.Second)
		b.succeed(d[0])
		b.clock.Advance(maintenance.ActivitySettle + time.Second)
		b.run(svc)
		eq(t, "r/j after the retry", counts(rows(activity.Fine.Width)["r/j"]), [4]int64{1, 1, 1, 0})
		eq(t, "hourly r/j after the retry", counts(rows(activity.Coarse.Width)["r/j"]), [4]int64{1, 1, 1, 0})

		// Keep: five-minute rows two days, hourly rows eight days.
		b.clock.Advance(activity.Fine.Keep + time.Hour)
		b.run(svc)
		eq(t, "five-minute rows past two days", len(rows(activity.Fine.Width)), 0)
		eq(t, "hourly rows past two days", len(rows(activity.Coarse.Width)), 2)
		b.clock.Advance(activity.Coarse.Keep)
		b.run(svc)
		eq(t, "hourly rows past eight days", len(rows(activity.Coarse.Width)), 0)
	})
}
