package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/filter"
	"github.com/backstophq/backstop/store"
)

// testWhereGo: a where outside the SQL subset (evaluated in Go) selects
// dead letters for DeadLetterGroupCounts and Redrive as it does for a
// listing (issue 17): the group counts equal those computed from the list
// and those of the same selection in SQL; a dry run counts and samples
// exactly the matching open dead letters, changing nothing; a redrive,
// with a patch and without, replays exactly them (not the other queue's,
// not the live tasks, not a discarded one), records each item's outcome
// (a conflict included), and, stopped by Limit, by a cancelled context or
// by CancelRedrive, resumes (the same filter again, or ResumeRedrive)
// without replaying any twice.
func (s *suite) testWhereGo(t *testing.T) {
	t.Parallel()
	b := s.setup(t, &backstop.Config{InlinePayloadLimit: 256})
	// killAs kills the queue's waiting tasks with err and reason.
	killAs := func(queue, errText string, reason bt.DeadReason) {
		t.Helper()
		now := b.clock.Now()
		got, err := b.store.Claim(b.ctx, store.ClaimParams{Queue: queue, WorkerID: "killer", Max: 10000, Now: now, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ss := make([]store.Settlement, len(got))
		for i, task := range got {
			ss[i] = store.Settlement{TaskID: task.ID, ExecutionID: task.ExecutionID, Outcome: bt.OutcomePermanentError,
				Error: errText, FinishedAt: now, State: bt.StateDead, DeadReason: reason}
		}
		if _, err := b.store.Settle(b.ctx, ss); err != nil {
			t.Fatal(err)
		}
	}
	// Errors of three causes, one longer than a group's 200 characters
	// (multibyte: cut by characters, not bytes).
	long := strings.Repeat("é", 150) + strings.Repeat("x", 100)
	causes := []struct {
		err    string
		reason bt.DeadReason
	}{{"timeout", bt.ReasonPermanentError}, {long, bt.ReasonAttemptsExhausted}, {"", bt.ReasonPoison}}
	payload := func(i int) json.RawMessage {
		tags := `["std"]`
		if i%2 == 0 {
			tags = `["vip","std"]`
		}
		pad := ""
		if i%7 == 0 {
			pad = strings.Repeat("p", 300) // spilled
		}
		return json.RawMessage(fmt.Sprintf(`{"n":%d,"name":"n%02d","tags":%s,"pad":%q}`, i, i, tags, pad))
	}
	for c, cause := range causes {
		for i := c; i < 45; i += 3 {
			ep := backstop.EnqueueParams{ID: fmt.Sprintf("g%02d", i), Queue: "g", Kind: "k", Payload: payload(i), MaxAttempts: 1}
			if i == 10 {
				ep.IdempotencyKey = "held" // a live task will hold its key: a conflict
			}
			b.enqueue(ep)
		}
		killAs("g", cause.err, cause.reason)
	}
	// Not to be replayed: a discarded match, the other queue's matches,
	// live tasks that match.
	if _, err := b.c.Discard(b.ctx, backstop.DiscardParams{ID: "g12", Reason: "not needed"}); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		b.enqueue(backstop.EnqueueParams{ID: fmt.Sprintf("o%d", i), Queue: "o", Kind: "k", Payload: payload(i * 3), MaxAttempts: 1})
	}
	killAs("o", "other", bt.ReasonPermanentError)
	for i := range 4 {
		b.enqueue(backstop.EnqueueParams{ID: fmt.Sprintf("live%d", i), Queue: "g", Kind: "k", Payload: payload(i * 3)})
	}
	b.enqueue(backstop.EnqueueParams{ID: "holder", Queue: "h", Kind: "k", IdempotencyKey: "held"})

	const goWhere = `payload.tags.exists(t, t == "vip")`
	x, err := filter.Compile(goWhere)
	if err != nil || x.InSQL() {
		t.Fatalf("%q: %v, in SQL %v", goWhere, err, err == nil && x.InSQL())
	}
	all := mustDL(t, b, backstop.ListParams{Limit: 1000})
	if len(all) != 51 {
		t.Fatalf("%d dead letters, want 51", len(all))
	}
	// matching lists the open dead letters of queue g the where matches.
	matching := func() []string {
		out := []string{}
		for _, tk := range mustDL(t, b, backstop.ListParams{Queue: "g", DLQStatuses: []backstop.DLQStatus{backstop.DLQOpen}, Limit: 1000}) {
			if x.Match(tk.Payload, tk.Attributes) {
				out = append(out, tk.ID)
			}
		}
		return out
	}
	want := matching()
	if len(want) != 22 { // the even of 0..44 but g12, discarded
		t.Fatalf("the fixture matches %d, want 22: %v", len(want), want)
	}

	// Group counts: as computed from the list, and as the same selection
	// counted in SQL (reasons, errors cut at 200 characters, none as "").
	groupsOf := func(ts []*backstop.Task, limit int) *backstop.DeadLetterGroups {
		byR, byE := map[string]int{}, map[string]int{}
		g := &backstop.DeadLetterGroups{ByReason: []store.GroupCount{}, ByError: []store.GroupCount{}}
		for _, tk := range ts {
			if !x.Match(tk.Payload, tk.Attributes) {
				continue
			}
			g.Total++
			byR[string(tk.DeadReason)]++
			e := []rune(tk.LastError)
			byE[string(e[:min(len(e), 200)])]++
		}
		for v, n := range byR {
			g.ByReason = append(g.ByReason, store.GroupCount{Value: v, Count: n})
		}
		for v, n := range byE {
			g.ByError = append(g.ByError, store.GroupCount{Value: v, Count: n})
		}
		store.SortGroups(g.ByReason)
		store.SortGroups(g.ByError)
		g.ByError, g.MoreErrors = store.CapGroups(g.ByError, limit)
		return g
	}
	groups := func(f backstop.ListParams, limit int) *backstop.DeadLetterGroups {
		t.Helper()
		g, err := b.c.DeadLetterGroupCounts(b.ctx, f, limit)
		if err != nil {
			t.Fatalf("groups %q: %v", f.Where, err)
		}
		return g
	}
	g := groups(backstop.ListParams{Where: goWhere}, 0)
	eq(t, "groups by a Go where", g, groupsOf(all, 20))
	if g.Total != 26 || len(g.ByReason) != 3 || len(g.ByError) != 4 {
		t.Fatalf("groups by a Go where: %+v", g)
	}
	eq(t, "groups by a Go where, one error", groups(backstop.ListParams{Where: goWhere}, 1), groupsOf(all, 1))
	eq(t, "groups by a Go where, open, queue g", groups(backstop.ListParams{Queue: "g", DLQStatuses: []backstop.DLQStatus{backstop.DLQOpen}, Where: goWhere}, 0),
		groupsOf(mustDL(t, b, backstop.ListParams{Queue: "g", DLQStatuses: []backstop.DLQStatus{backstop.DLQOpen}, Limit: 1000}), 20))
	eq(t, "groups, Go and SQL", groups(backstop.ListParams{Where: `int(payload.n) % 3 == 0`}, 0), groups(backstop.ListParams{Where: `payload.n in [0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33, 36, 39, 42]`}, 0))
	eq(t, "groups, Go and SQL, every error", groups(backstop.ListParams{Where: `payload.name.startsWith("n")`}, 0), groups(backstop.ListParams{Where: `has(payload.name)`}, 0))
	if g := groups(backstop.ListParams{Where: `payload.name.startsWith("n")`}, 0); !slices.ContainsFunc(g.ByError, func(c store.GroupCount) bool { return c.Value == string([]rune(long)[:200]) }) {
		t.Fatalf("the long error's group is not its first 200 characters: %+v", g.ByError)
	}

	// Dry run: the count and a sample of exactly the matching open dead
	// letters; with a patch, their diffs; nothing changed.
	p := backstop.RedriveParams{Filter: backstop.ListParams{Queue: "g", Where: goWhere}}
	dry := p
	dry.DryRun, dry.SampleSize, dry.MergePatch = true, 3, json.RawMessage(`{"fixed":true}`)
	pre, err := b.c.Redrive(b.ctx, dry, nil)
	if err != nil {
		t.Fatal(err)
	}
	var sample []string
	for _, sm := range pre.Preview.Sample {
		sample = append(sample, sm.ID)
		if sm.Diff == nil || len(sm.Diff.Changes) != 1 || sm.Diff.Changes[0].Path != "/fixed" {
			t.Fatalf("sample %s: diff %+v", sm.ID, sm.Diff)
		}
	}
	eq(t, "dry run matched", pre.Preview.Matched, len(want))
	eq(t, "dry run sample", sample, want[:3])
	eq(t, "open after a dry run", matching(), want)
	if rs, err := b.c.Redrives(b.ctx, "", 10); err != nil || len(rs) != 0 {
		t.Fatalf("a dry run recorded a redrive: %+v %v", rs, err)
	}

	// The redrive, stopped three ways, each run continuing the last.
	p.BatchSize = 2
	lim := p
	lim.Limit = 3
	res, err := b.c.Redrive(b.ctx, lim, nil)
	if err != nil || res.Done || res.Replayed != 3 || res.Total != len(want) {
		t.Fatalf("redrive with limit 3: %+v %v", res, err)
	}
	id := res.RedriveID
	ctx, cancel := context.WithCancel(b.ctx)
	res, err = b.c.Redrive(ctx, p, func(pr backstop.RedriveProgress) {
		if pr.Replayed >= 5 {
			cancel()
		}
	})
	cancel()
	if !errors.Is(err, backstop.ErrInterrupted) || res.RedriveID != id || !res.Resumed || res.Replayed+res.Failed >= len(want) {
		t.Fatalf("interrupted run: %+v %v", res, err)
	}
	canceled := false
	res, err = b.c.Redrive(b.ctx, p, func(pr backstop.RedriveProgress) {
		if pr.Replayed >= 8 && !canceled {
			canceled = true
			if _, err := b.c.CancelRedrive(b.ctx, pr.RedriveID); err != nil {
				t.Errorf("cancel: %v", err)
			}
		}
	})
	if !errors.Is(err, backstop.ErrRedriveCanceled) || res.RedriveID != id || res.Replayed+res.Failed >= len(want) {
		t.Fatalf("canceled run: %+v %v", res, err)
	}
	b.clock.Advance(time.Second)
	res, err = b.c.ResumeRedrive(b.ctx, id, backstop.RedriveParams{BatchSize: 2}, nil)
	if err != nil || !res.Done || res.RedriveID != id || res.Replayed != len(want)-1 || res.Failed != 1 {
		t.Fatalf("resumed: %+v %v", res, err)
	}
	for _, tk := range mustDL(t, b, backstop.ListParams{Limit: 1000}) {
		task := b.get(tk.ID)
		matched := slices.Contains(want, tk.ID) && tk.ID != "g10"
		if replayed := task.ReplayCount > 0; replayed != matched {
			t.Fatalf("%s (matched %v): replay count %d, status %s", tk.ID, matched, task.ReplayCount, task.DLQStatus)
		}
		if task.ReplayCount > 1 {
			t.Fatalf("%s replayed %d times", tk.ID, task.ReplayCount)
		}
	}
	for i := range 4 {
		if task := b.get(fmt.Sprintf("live%d", i)); task.State != backstop.StatePending || task.ReplayCount != 0 {
			t.Fatalf("live task %s touched: %s %d", task.ID, task.State, task.ReplayCount)
		}
	}
	eq(t, "open matches after the redrive", matching(), []string{"g10"})
	rec, err := b.c.GetRedrive(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "outcomes", rec.Outcomes, map[string]int{"replayed": len(want) - 1, "conflict": 1})
	failed, err := b.c.RedriveItems(b.ctx, backstop.RedriveItemsParams{ID: id, Failed: true})
	if err != nil || len(failed) != 1 || failed[0].TaskID != "g10" || failed[0].Outcome != backstop.OutcomeConflict {
		t.Fatalf("failed items: %+v %v", failed, err)
	}

	// With a patch: exactly the Go where's other selection, patched.
	const patchWhere = `payload.name.endsWith("1") && payload.n > 20`
	px, _ := filter.Compile(patchWhere)
	var wantP []string
	for _, tk := range mustDL(t, b, backstop.ListParams{Queue: "g", DLQStatuses: []backstop.DLQStatus{backstop.DLQOpen}, Limit: 1000}) {
		if px.Match(tk.Payload, tk.Attributes) {
			wantP = append(wantP, tk.ID)
		}
	}
	eq(t, "patch selection", wantP, []string{"g21", "g31", "g41"})
	res, err = b.c.Redrive(b.ctx, backstop.RedriveParams{Filter: backstop.ListParams{Where: patchWhere}, MergePatch: json.RawMessage(`{"fixed":true}`)}, nil)
	if err != nil || !res.Done || res.Replayed != 3 {
		t.Fatalf("patched redrive: %+v %v", res, err)
	}
	var gotP []string
	for _, tk := range listAll(t, b, backstop.ListParams{Where: `has(payload.fixed)`, Limit: 1000}) {
		gotP = append(gotP, tk.ID)
	}
	eq(t, "patched", gotP, wantP)
}

func listAll(t *testing.T, b *bundle, f backstop.ListParams) []*backstop.Task {
	t.Helper()
	ts, err := b.c.List(b.ctx, f)
	if err != nil {
		t.Fatalf("list %q: %v", f.Where, err)
	}
	return ts
}
