package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
)

// testRedriveRunner: a running redrive has a runner that records a
// heartbeat on its record (issue 17). The store claims a redrive for a
// runner only when it has none, is already its, was not seen since
// StaleBefore, or by force; a renewal never claims; a release clears only
// its own runner. ResumeRedrive refuses a redrive whose runner was seen
// recently (ErrConflict naming it), takes it once the runner is stale or
// with Force, and a runner whose redrive was taken over stops after its
// batch.
func (s *suite) testRedriveRunner(t *testing.T) {
	t.Run("Store", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		st := b.store
		now := b.clock.Now()
		rec, _, err := st.StartRedrive(b.ctx, store.Redrive{ID: "rr1", FilterKey: "k", Filter: json.RawMessage(`{}`), Snapshot: now, StartedAt: now})
		if err != nil {
			t.Fatal(err)
		}
		if rec.Runner != "" || rec.HeartbeatAt != nil {
			t.Fatalf("a new record has a runner: %+v", rec)
		}
		claim := func(c store.RedriveClaim) (store.Redrive, bool) {
			t.Helper()
			c.ID = rec.ID
			got, ok, err := st.ClaimRedrive(b.ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			return got, ok
		}
		window := 15 * time.Second
		got, ok := claim(store.RedriveClaim{Runner: "a", At: now, StaleBefore: now.Add(-window)})
		if !ok || got.Runner != "a" || got.HeartbeatAt == nil || !got.HeartbeatAt.Equal(now) {
			t.Fatalf("first claim: %v %+v", ok, got)
		}
		t1 := now.Add(time.Second)
		got, ok = claim(store.RedriveClaim{Runner: "b", At: t1, StaleBefore: t1.Add(-window)})
		if ok || got.Runner != "a" || !got.HeartbeatAt.Equal(now) {
			t.Fatalf("claim of a fresh runner's redrive: %v %+v", ok, got)
		}
		if got, ok = claim(store.RedriveClaim{Runner: "b", At: t1, Renew: true}); ok || got.Runner != "a" {
			t.Fatalf("renewal by another runner: %v %+v", ok, got)
		}
		t2 := now.Add(2 * time.Second)
		if got, ok = claim(store.RedriveClaim{Runner: "a", At: t2, Renew: true}); !ok || !got.HeartbeatAt.Equal(t2) {
			t.Fatalf("renewal: %v %+v", ok, got)
		}
		if got, ok = claim(store.RedriveClaim{Runner: "a", At: t2, StaleBefore: t2.Add(-window)}); !ok || got.Runner != "a" {
			t.Fatalf("claim by its runner: %v %+v", ok, got)
		}
		// Not seen for longer than the window: anyone takes it.
		t3 := t2.Add(window + time.Second)
		if got, ok = claim(store.RedriveClaim{Runner: "b", At: t3, StaleBefore: t3.Add(-window)}); !ok || got.Runner != "b" {
			t.Fatalf("claim of a stale runner's redrive: %v %+v", ok, got)
		}
		if got, ok = claim(store.RedriveClaim{Runner: "c", At: t3, StaleBefore: t3.Add(-window), Force: true}); !ok || got.Runner != "c" {
			t.Fatalf("forced claim: %v %+v", ok, got)
		}
		if err := st.ReleaseRedrive(b.ctx, rec.ID, "b"); err != nil {
			t.Fatal(err)
		}
		if got, err := st.GetRedrive(b.ctx, rec.ID); err != nil || got.Runner != "c" {
			t.Fatalf("release by a runner that lost it: %+v %v", got, err)
		}
		if err := st.ReleaseRedrive(b.ctx, rec.ID, "c"); err != nil {
			t.Fatal(err)
		}
		if got, err := st.GetRedrive(b.ctx, rec.ID); err != nil || got.Runner != "" || got.HeartbeatAt == nil || !got.HeartbeatAt.Equal(t3) {
			t.Fatalf("released: %+v %v", got, err)
		}
		if got, ok = claim(store.RedriveClaim{Runner: "d", At: t3, StaleBefore: t3.Add(-window)}); !ok || got.Runner != "d" {
			t.Fatalf("claim of a released redrive: %v %+v", ok, got)
		}
		if recs, err := st.Redrives(b.ctx, "", 10); err != nil || len(recs) != 1 || recs[0].Runner != "d" || !recs[0].HeartbeatAt.Equal(t3) {
			t.Fatalf("list: %+v %v", recs, err)
		}
		if _, _, err := st.ClaimRedrive(b.ctx, store.RedriveClaim{ID: "nope", Runner: "a", At: t3}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown: %v", err)
		}
	})

	t.Run("ResumeRefusedWhileTheRunnerIsAlive", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		for i := range 20 {
			b.enqueue(backstop.EnqueueParams{ID: fmt.Sprintf("h%02d", i), Queue: "h", Kind: "k", Payload: json.RawMessage(`{"v":1}`)})
		}
		b.kill("h", "x")
		op, _ := backstop.ParsePatch("fixed=true")
		p := backstop.RedriveParams{Filter: backstop.ListParams{Queue: "h"}, Patch: []backstop.PatchOp{op}, BatchSize: 5, Limit: 5}
		res, err := b.c.Redrive(b.ctx, p, nil)
		if err != nil || res.Replayed != 5 || res.Done {
			t.Fatalf("first run: %+v %v", res, err)
		}
		// The run stopped at its limit and let go of the redrive.
		rec, err := b.c.GetRedrive(b.ctx, res.RedriveID)
		if err != nil || rec.Runner != "" || rec.HeartbeatAt == nil || rec.RunnerAlive || !rec.Resumable {
			t.Fatalf("after the first run: %+v %v", rec, err)
		}
		// Another process runs it now (its heartbeat is fresh).
		if _, ok, err := b.store.ClaimRedrive(b.ctx, store.RedriveClaim{ID: res.RedriveID, Runner: "host/42/other", At: b.clock.Now()}); err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		rec, err = b.c.GetRedrive(b.ctx, res.RedriveID)
		if err != nil || rec.Runner != "host/42/other" || !rec.RunnerAlive || rec.Resumable {
			t.Fatalf("with a live runner: %+v %v", rec, err)
		}
		b.clock.Advance(b.c.RedriveStaleAfter() - time.Second)
		_, err = b.c.ResumeRedrive(b.ctx, res.RedriveID, backstop.RedriveParams{}, nil)
		if !errors.Is(err, backstop.ErrConflict) || !strings.Contains(err.Error(), "host/42/other") || !strings.Contains(err.Error(), "--force") {
			t.Fatalf("resume while its runner is alive: %v", err)
		}
		// Running the same redrive again is refused too.
		p.Limit = 0
		if _, err := b.c.Redrive(b.ctx, p, nil); !errors.Is(err, backstop.ErrConflict) {
			t.Fatalf("the same redrive again while its runner is alive: %v", err)
		}
		if rec, _ := b.c.GetRedrive(b.ctx, res.RedriveID); rec.Replayed != 5 || rec.Runner != "host/42/other" {
			t.Fatalf("the refused resumes changed the record: %+v", rec)
		}
		// Once the runner is stale, the resume takes it and finishes.
		b.clock.Advance(2 * time.Second)
		if rec, _ := b.c.GetRedrive(b.ctx, res.RedriveID); rec.RunnerAlive || !rec.Resumable {
			t.Fatalf("with a stale runner: %+v", rec)
		}
		fin, err := b.c.ResumeRedrive(b.ctx, res.RedriveID, backstop.RedriveParams{}, nil)
		if err != nil || !fin.Done || fin.Replayed != 20 {
			t.Fatalf("resume of a stale runner's redrive: %+v %v", fin, err)
		}
		rec, err = b.c.GetRedrive(b.ctx, res.RedriveID)
		if err != nil || rec.Status != backstop.RedriveDone || rec.Runner != "" || rec.Resumable || rec.Outcomes["replayed"] != 20 {
			t.Fatalf("after the resume: %+v %v", rec, err)
		}
		for i := range 20 {
			eq(t, "replay_count", b.get(fmt.Sprintf("h%02d", i)).ReplayCount, 1)
		}
	})

	t.Run("ForceTakesOverAndTheOtherRunnerStops", func(t *testing.T) {
		t.Parallel()
		b := s.setup(t, nil)
		for i := range 20 {
			b.enqueue(backstop.EnqueueParams{ID: fmt.Sprintf("f%02d", i), Queue: "f", Kind: "k", Payload: json.RawMessage(`{"v":1}`)})
		}
		b.kill("f", "x")
		op, _ := backstop.ParsePatch("fixed=true")
		p := backstop.RedriveParams{Filter: backstop.ListParams{Queue: "f"}, Patch: []backstop.PatchOp{op}, BatchSize: 5}
		// While the first run goes, a forced resume (here: a forced claim
		// by another runner) takes the redrive over; the first run stops
		// after its batch.
		taken := false
		res, err := b.c.Redrive(b.ctx, p, func(pr backstop.RedriveProgress) {
			if pr.Replayed >= 5 && !taken {
				taken = true
				if _, ok, err := b.store.ClaimRedrive(b.ctx, store.RedriveClaim{ID: pr.RedriveID, Runner: "other", At: b.clock.Now(), Force: true}); err != nil || !ok {
					t.Errorf("forced claim: %v %v", ok, err)
				}
			}
		})
		if !errors.Is(err, backstop.ErrInterrupted) || !strings.Contains(err.Error(), `"other"`) || res.Replayed != 10 {
			t.Fatalf("the taken-over run: %+v %v", res, err)
		}
		if rec, _ := b.c.GetRedrive(b.ctx, res.RedriveID); rec.Runner != "other" || !rec.RunnerAlive {
			t.Fatalf("the stopped run let go of another's redrive: %+v", rec)
		}
		if _, err := b.c.ResumeRedrive(b.ctx, res.RedriveID, backstop.RedriveParams{}, nil); !errors.Is(err, backstop.ErrConflict) {
			t.Fatalf("resume without force: %v", err)
		}
		fin, err := b.c.ResumeRedrive(b.ctx, res.RedriveID, backstop.RedriveParams{Force: true}, nil)
		if err != nil || !fin.Done || fin.Replayed != 20 {
			t.Fatalf("forced resume: %+v %v", fin, err)
		}
		for i := range 20 {
			eq(t, "replay_count", b.get(fmt.Sprintf("f%02d", i)).ReplayCount, 1)
		}
	})
}
