package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

// testActivityRollup: the rollup's rows merge by adding counts and
// histograms; the watermark moves with them only from the one the round
// read (a stale or second first round writes nothing: ErrConflict); reads
// select by width, range, queue and kind in bucket order; deletes go by
// width and bucket start. (Its FinishedWork read is proven with the
// service, internal/maintenance/activity_test.go, on both stores.)
func (s *suite) testActivityRollup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := s.open(t)
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	five, hour := 5*time.Minute, time.Hour
	if _, ok, err := st.ActivityWatermark(ctx); ok || err != nil {
		t.Fatalf("a new rollup has a watermark: %v %v", ok, err)
	}
	row := func(w time.Duration, b time.Time, q, k string, ok int64, wait ...int64) store.ActivityRow {
		return store.ActivityRow{Width: w, Bucket: b, Queue: q, Kind: k, Succeeded: ok, Failed: 1, Retried: 1, Wait: wait, Run: []int64{0, ok}}
	}
	first := []store.ActivityRow{row(five, at, "q", "k", 2, 1, 0, 1), row(five, at.Add(five), "q", "j", 1), row(hour, at, "q", "k", 2, 1, 0, 1)}
	if err := st.AddActivity(ctx, time.Time{}, at.Add(10*time.Minute), first); err != nil {
		t.Fatal(err)
	}
	wm := at.Add(10 * time.Minute)
	if got, ok, err := st.ActivityWatermark(ctx); !ok || err != nil || !got.Equal(wm) {
		t.Fatalf("watermark %v %v %v, want %v", got, ok, err, wm)
	}
	for _, from := range []time.Time{{}, at} {
		if err := st.AddActivity(ctx, from, wm.Add(time.Minute), first); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("a round from %v: %v, want ErrConflict", from, err)
		}
	}
	if err := st.AddActivity(ctx, wm, wm.Add(time.Minute), []store.ActivityRow{row(five, at, "q", "k", 3, 0, 2)}); err != nil {
		t.Fatal(err)
	}
	read := func(w time.Duration, q, k string) []store.ActivityRow {
		t.Helper()
		rs, err := st.ReadActivity(ctx, w, at, at.Add(hour), q, k)
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	rs := read(five, "", "")
	eq(t, "five-minute rows", len(rs), 2)
	got := rs[0]
	if !got.Bucket.Equal(at) || got.Width != five || got.Queue != "q" || got.Kind != "k" || got.Succeeded != 5 || got.Failed != 2 ||
		got.Retried != 2 || !slices.Equal(got.Wait, []int64{1, 2, 1}) || !slices.Equal(got.Run, []int64{0, 5}) {
		t.Fatalf("merged row %+v", got)
	}
	eq(t, "second bucket", rs[1].Bucket.Equal(at.Add(five)) && rs[1].Kind == "j" && rs[1].Wait == nil, true)
	eq(t, "kind j", len(read(five, "", "j")), 1)
	eq(t, "queue r", len(read(five, "r", "")), 0)
	eq(t, "hourly rows", len(read(hour, "q", "k")), 1)
	n, err := st.DeleteActivity(ctx, five, at.Add(five))
	if err != nil || n != 1 {
		t.Fatalf("delete: %d %v, want 1", n, err)
	}
	eq(t, "five-minute rows left", len(read(five, "", "")), 1)
	eq(t, "hourly rows left", len(read(hour, "", "")), 1)
}
