package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// kill enqueues a task over the API and fails its only attempt for good:
// it becomes an open dead letter.
func kill(t *testing.T, b *bundle, task apiclient.Task) string {
	t.Helper()
	ctx := context.Background()
	op := b.as[api.RoleOperator]
	task.MaxAttempts = 1
	res, err := op.Enqueue(ctx, task)
	if err != nil {
		t.Fatal(err)
	}
	c := claimOne(t, op, task.Queue)
	if c.ID != res.Task.ID {
		t.Fatalf("claimed %s, want %s", c.ID, res.Task.ID)
	}
	r, err := op.Fail(ctx, c.ID, api.FailRequest{LeaseToken: c.LeaseToken, Outcome: bt.OutcomePermanentError, Error: "card declined"})
	if err != nil || r.State != bt.StateDead {
		t.Fatalf("fail: %+v %v", r, err)
	}
	return c.ID
}

func TestDLQEndpoints(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		viewer, op, admin := b.as[api.RoleViewer], b.as[api.RoleOperator], b.as[api.RoleAdmin]
		var ids []string
		for i := range 3 {
			ids = append(ids, kill(t, b, apiclient.Task{Queue: "pay", Kind: "charge",
				Payload: json.RawMessage(fmt.Sprintf(`{"amount":%d,"card":"4242"}`, i)), Attributes: map[string]string{"tenant": "acme"}}))
		}

		// List: filters, cursor, redaction for viewers.
		var listed []string
		q := url.Values{"queue": {"pay"}, "status": {"open"}, "attr": {"tenant=acme"}, "since": {"1h"}, "limit": {"2"},
			"include": {"payload"}}
		for range 5 {
			l, err := viewer.DLQList(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range l.Items {
				if !strings.HasSuffix(string(it.Payload), `,"card":"4242"}`) || it.DLQStatus != bt.DLQOpen || it.DeadReason != bt.ReasonPermanentError {
					t.Fatalf("viewer's dead letter: %+v", it.Task)
				}
				listed = append(listed, it.ID)
			}
			if l.NextCursor == nil {
				break
			}
			q.Set("after", *l.NextCursor)
		}
		if !slices.Equal(listed, ids) {
			t.Fatalf("listed %v, want %v", listed, ids)
		}
		if l, err := viewer.DLQList(ctx, url.Values{"error_contains": {"nope"}}); err != nil || len(l.Items) != 0 {
			t.Fatalf("error_contains: %+v %v", l, err)
		}
		_, err := viewer.DLQList(ctx, url.Values{"reason": {"bogus"}})
		mustCode(t, err, "invalid_input")
		_, err = viewer.DLQList(ctx, url.Values{"since": {"yesterday"}})
		mustCode(t, err, "invalid_query")
		_, err = viewer.DLQList(ctx, url.Values{"colour": {"red"}})
		mustCode(t, err, "invalid_query")

		// Show: executions and events; a live task is not a dead letter.
		dl, err := viewer.DLQShow(ctx, ids[0])
		if err != nil || dl.Executions == nil || len(*dl.Executions) != 1 || !strings.HasSuffix(string(dl.Payload), `,"card":"4242"}`) || dl.Events == nil {
			t.Fatalf("show: %+v %v", dl, err)
		}
		live, err := op.Enqueue(ctx, apiclient.Task{Queue: "other", Kind: "k"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = viewer.DLQShow(ctx, live.Task.ID)
		mustCode(t, err, "not_found")
		_, err = viewer.DLQShow(ctx, "no-such-task")
		mustCode(t, err, "not_found")

		// Replay is the admin's.
		_, err = op.Replay(ctx, ids[0], api.ReplayRequest{})
		mustCode(t, err, "forbidden")
		// A patch that does not apply: 422, nothing changed.
		_, err = admin.Replay(ctx, ids[0], api.ReplayRequest{PatchRequest: api.PatchRequest{Patch: json.RawMessage(`{"amount.x":1}`)}})
		mustCode(t, err, "unprocessable")
		_, err = admin.Replay(ctx, ids[0], api.ReplayRequest{PatchRequest: api.PatchRequest{Patch: json.RawMessage(`"amount=1"`)}})
		mustCode(t, err, "invalid_input")
		_, err = admin.Replay(ctx, "no-such-task", api.ReplayRequest{})
		mustCode(t, err, "not_found")
		// Patched replay: merge patch first, then the path patches in order.
		rr, err := admin.Replay(ctx, ids[0], api.ReplayRequest{PatchRequest: api.PatchRequest{
			MergePatch: json.RawMessage(`{"card":null}`), Patch: json.RawMessage(`{"amount":100,"meta.by":"ops"}`)}})
		if err != nil || !rr.Replayed || rr.Task == nil || rr.Task.State != bt.StatePending || rr.Task.Attempt != 0 {
			t.Fatalf("replay: %+v %v", rr, err)
		}
		if got := string(rr.Task.Payload); got != `{"amount":100,"meta":{"by":"ops"}}` {
			t.Fatalf("patched payload %s", got)
		}
		// Again: no longer a dead letter, nothing changes.
		rr, err = admin.Replay(ctx, ids[0], api.ReplayRequest{})
		if err != nil || rr.Replayed || rr.State != bt.StatePending {
			t.Fatalf("second replay: %+v %v", rr, err)
		}
		// The history names the token as the actor; viewers do not see the patch.
		evs, err := b.lib.Events(ctx, ids[0])
		if err != nil || !slices.ContainsFunc(evs, func(e bt.Event) bool { return e.Type == "dlq.replayed" && e.Actor == "test-admin" }) {
			t.Fatalf("events: %+v %v", evs, err)
		}
		// A copy under a new id, with a list patch and a delay.
		rr, err = admin.Replay(ctx, ids[1], api.ReplayRequest{NewID: true, PatchRequest: api.PatchRequest{
			Patch: json.RawMessage(`[{"path":"amount","value":7}]`), Delay: bt.Duration(time.Hour)}})
		if err != nil || !rr.Replayed || rr.NewID == "" || rr.Task.ID != rr.NewID || rr.Task.State != bt.StateScheduled ||
			rr.Task.ReplayedFrom != ids[1] {
			t.Fatalf("replay as new id: %+v %v", rr, err)
		}

		// 409: a live task holds the dead letter's idempotency key.
		dup := kill(t, b, apiclient.Task{Queue: "idem", Kind: "k", IdempotencyKey: "once"})
		if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "idem", Kind: "k", IdempotencyKey: "once"}); err != nil {
			t.Fatal(err)
		}
		_, err = admin.Replay(ctx, dup, api.ReplayRequest{})
		mustCode(t, err, "conflict")

		// Discard needs a reason; resolve does not.
		st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/"+ids[2]+"/discard", "application/json", `{}`)
		if st != 400 || !strings.Contains(string(body), `"field":"reason"`) {
			t.Fatalf("discard without reason: %d %s", st, body)
		}
		_, err = op.Discard(ctx, ids[2], "dup")
		mustCode(t, err, "forbidden")
		d, err := admin.Discard(ctx, ids[2], "a duplicate charge")
		if err != nil || d.DLQStatus != bt.DLQDiscarded {
			t.Fatalf("discard: %+v %v", d, err)
		}
		_, err = admin.Discard(ctx, ids[2], "again")
		mustCode(t, err, "not_found")
		st, body = b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/"+ids[1]+"/resolve", "", "")
		if st != 404 {
			t.Fatalf("resolve a dead letter replayed as a copy (no longer open): %d %s", st, body)
		}
		res, err := admin.Resolve(ctx, dup, "fixed by hand")
		if err != nil || res.DLQStatus != bt.DLQResolved {
			t.Fatalf("resolve: %+v %v", res, err)
		}

		// Export: NDJSON, every dead letter with its history, redacted for viewers.
		var lines []api.ExportLine
		n, err := viewer.ExportDLQ(ctx, url.Values{"queue": {"pay"}}, func(l api.ExportLine) error { lines = append(lines, l); return nil })
		if err != nil || n != 2 || len(lines) != 2 {
			t.Fatalf("export: %d %v", n, err)
		}
		for _, l := range lines {
			if !strings.HasSuffix(string(l.Payload), `,"card":"4242"}`) || len(l.Executions) == 0 || len(l.Events) == 0 {
				t.Fatalf("export line: %+v", l)
			}
		}
		st, body = b.raw(t, api.RoleAdmin, "GET", "/v1/dlq/export?queue=none", "", "")
		if st != 200 || len(body) != 0 {
			t.Fatalf("empty export: %d %q", st, body)
		}
		_, err = viewer.ExportDLQ(ctx, url.Values{"status": {"bogus"}}, func(api.ExportLine) error { return nil })
		mustCode(t, err, "invalid_input")

		// Purge: discarded and resolved by default.
		_, err = op.PurgeDLQ(ctx, api.PurgeRequest{})
		mustCode(t, err, "forbidden")
		pr, err := admin.PurgeDLQ(ctx, api.PurgeRequest{OlderThan: bt.Duration(time.Hour)})
		if err != nil || pr.Purged != 0 {
			t.Fatalf("purge older than an hour: %+v %v", pr, err)
		}
		pr, err = admin.PurgeDLQ(ctx, api.PurgeRequest{Statuses: []bt.DLQStatus{bt.DLQDiscarded, bt.DLQResolved}, DryRun: true})
		if err != nil || pr.Purged != 0 || pr.WouldPurge != 2 || !pr.DryRun {
			t.Fatalf("purge dry run: %+v %v", pr, err)
		}
		pr, err = admin.PurgeDLQ(ctx, api.PurgeRequest{Statuses: []bt.DLQStatus{bt.DLQDiscarded, bt.DLQResolved}})
		if err != nil || pr.Purged != 2 {
			t.Fatalf("purge: %+v %v", pr, err)
		}
		_, err = admin.PurgeDLQ(ctx, api.PurgeRequest{Statuses: []bt.DLQStatus{"bogus"}})
		mustCode(t, err, "invalid_input")
	})
}

func TestRedriveEndpoints(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		viewer, op, admin := b.as[api.RoleViewer], b.as[api.RoleOperator], b.as[api.RoleAdmin]
		for i := range 3 {
			kill(t, b, apiclient.Task{Queue: "bulk", Kind: "k", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
			kill(t, b, apiclient.Task{Queue: "slow", Kind: "k"})
		}
		_, err := op.Redrive(ctx, api.RedriveRequest{Queue: "bulk"})
		mustCode(t, err, "forbidden")
		_, err = admin.Redrive(ctx, api.RedriveRequest{Reason: "bogus"})
		mustCode(t, err, "invalid_input")
		_, err = admin.Redrive(ctx, api.RedriveRequest{Wait: bt.Duration(time.Hour)})
		mustCode(t, err, "invalid_input")

		// Finished within the wait: 200 with the final progress.
		st, err := admin.Redrive(ctx, api.RedriveRequest{Queue: "bulk", Wait: bt.Duration(20 * time.Second),
			PatchRequest: api.PatchRequest{Patch: json.RawMessage(`{"redriven":true}`)}})
		if err != nil || st.Status != "done" || st.Replayed != 3 || st.Total != 3 || !st.Done || st.Actor != "test-admin" {
			t.Fatalf("redrive: %+v %v", st, err)
		}
		l, err := admin.List(ctx, url.Values{"queue": {"bulk"}, "state": {"pending"}, "include": {"payload"}})
		if err != nil || len(l.Items) != 3 || !strings.Contains(string(l.Items[0].Payload), `"redriven":true`) {
			t.Fatalf("redriven tasks: %+v %v", l, err)
		}
		got, err := viewer.RedriveStatus(ctx, st.RedriveID)
		if err != nil || got.Status != "done" || got.Replayed != 3 {
			t.Fatalf("status: %+v %v", got, err)
		}

		// Paced: 202 at once, then progress until done.
		st, err = admin.Redrive(ctx, api.RedriveRequest{Queue: "slow", Rate: 5})
		if err != nil || st.Status != "running" || st.RedriveID == "" || st.Total != 3 {
			t.Fatalf("paced redrive: %+v %v", st, err)
		}
		testwait.For(t, "the paced redrive to finish", func() bool {
			got, err = viewer.RedriveStatus(ctx, st.RedriveID)
			if err != nil {
				t.Fatal(err)
			}
			return got.Status != "running"
		})
		if got.Status != "done" || got.Replayed != 3 || got.FinishedAt == nil {
			t.Fatalf("paced redrive ended: %+v", got)
		}
		_, err = viewer.RedriveStatus(ctx, "no-such-redrive")
		mustCode(t, err, "not_found")
	})
}

// TestRedriveInterruptedByClose: closing the server interrupts a running
// redrive; the same redrive again resumes it.
func TestRedriveInterruptedByClose(t *testing.T) {
	t.Parallel()
	b := setup(t, testdbSQLite(t), setupOpts{rateLimit: -1})
	ctx := context.Background()
	for range 4 {
		kill(t, b, apiclient.Task{Queue: "q", Kind: "k"})
	}
	st, err := b.as[api.RoleAdmin].Redrive(ctx, api.RedriveRequest{Queue: "q", Rate: 1})
	if err != nil || st.Status != "running" {
		t.Fatalf("redrive: %+v %v", st, err)
	}
	b.srv.Close() // waits for the redrive to stop
	// The library resumes the same redrive.
	prog, err := b.lib.Redrive(ctx, backstopRedrive("q"), nil)
	if err != nil || !prog.Resumed || prog.RedriveID != st.RedriveID || !prog.Done || prog.Replayed != 4 {
		t.Fatalf("resume: %+v %v", prog, err)
	}
}

func TestQueuePauseEndpoints(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		viewer, op := b.as[api.RoleViewer], b.as[api.RoleOperator]
		if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "mail", Kind: "send"}); err != nil {
			t.Fatal(err)
		}
		_, err := viewer.PauseQueue(ctx, "mail")
		mustCode(t, err, "forbidden")
		_, err = op.PauseQueue(ctx, "bad queue!")
		mustCode(t, err, "invalid_input")
		p, err := op.PauseQueue(ctx, "mail")
		if err != nil || !p.Paused || !p.Changed || p.PausedBy != "test-operator" || p.PausedAt == nil {
			t.Fatalf("pause: %+v %v", p, err)
		}
		if p, err := op.PauseQueue(ctx, "mail"); err != nil || p.Changed {
			t.Fatalf("pause again: %+v %v", p, err)
		}
		if _, err := op.PauseQueue(ctx, "empty"); err != nil {
			t.Fatal(err)
		}
		qs, err := viewer.Queues(ctx)
		if err != nil || len(qs.Items) != 2 || qs.Items[0].Name != "empty" || !qs.Items[0].Paused || qs.Items[0].Total != 0 ||
			qs.Items[1].Name != "mail" || !qs.Items[1].Paused || qs.Items[1].Counts[bt.StatePending] != 1 {
			t.Fatalf("queues: %+v %v", qs, err)
		}
		// A remote worker gets nothing from a paused queue.
		ts, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"mail"}, WorkerID: "w", Max: 5})
		if err != nil || len(ts) != 0 {
			t.Fatalf("claimed %d from a paused queue: %v", len(ts), err)
		}
		r, err := op.ResumeQueue(ctx, "mail")
		if err != nil || r.Paused || !r.Changed {
			t.Fatalf("resume: %+v %v", r, err)
		}
		claimOne(t, op, "mail")
		if r, err := op.ResumeQueue(ctx, "mail"); err != nil || r.Changed {
			t.Fatalf("resume again: %+v %v", r, err)
		}
	})
}

func TestRunEndpoints(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		viewer, op := b.as[api.RoleViewer], b.as[api.RoleOperator]
		run := map[string]string{"run_id": "import-7"}
		for range 3 {
			if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "import", Kind: "row", Attributes: run,
				Progress: &bt.Progress{Total: 4}}); err != nil {
				t.Fatal(err)
			}
		}
		c := claimOne(t, op, "import")
		if _, err := op.Complete(ctx, c.ID, api.CompleteRequest{LeaseToken: c.LeaseToken, Progress: &bt.Progress{Total: 4, Completed: 4}}); err != nil {
			t.Fatal(err)
		}
		kill(t, b, apiclient.Task{Queue: "import2", Kind: "row", Attributes: run})
		if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "import", Kind: "row", Attributes: map[string]string{"run_id": "other"}}); err != nil {
			t.Fatal(err)
		}

		r, err := viewer.Run(ctx, "import-7")
		if err != nil || r.Total != 4 || r.Counts[bt.StateSucceeded] != 1 || r.Counts[bt.StatePending] != 2 || r.Counts[bt.StateDead] != 1 ||
			r.DeadLetters != 1 || r.Progress.Total != 12 || r.Progress.Completed != 4 || r.Finished || r.LastActivity.Before(r.FirstActivity) {
			t.Fatalf("run: %+v %v", r, err)
		}
		_, err = viewer.Run(ctx, "nope")
		mustCode(t, err, "not_found")

		var ids []string
		q := url.Values{"limit": {"3"}, "include": {"payload"}}
		for range 3 {
			l, err := viewer.RunTasks(ctx, "import-7", q)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range l.Items {
				if it.Attributes["run_id"] != "import-7" || string(it.Payload) != `{}` {
					t.Fatalf("run task: %+v", it.Task)
				}
				ids = append(ids, it.ID)
			}
			if l.NextCursor == nil {
				break
			}
			q.Set("after", *l.NextCursor)
		}
		if len(ids) != 4 || !slices.IsSorted(ids) {
			t.Fatalf("run tasks: %v", ids)
		}
		l, err := viewer.RunTasks(ctx, "import-7", url.Values{"state": {"dead"}})
		if err != nil || len(l.Items) != 1 {
			t.Fatalf("run tasks by state: %+v %v", l, err)
		}
	})
}

func backstopRedrive(queue string) backstop.RedriveParams {
	return backstop.RedriveParams{Filter: backstop.ListParams{Queue: queue}, Actor: "test-admin"}
}

// GET /v1/dlq/groups counts a filter's dead letters by reason and by
// error on the server, largest groups first, bounded; bad input is a 400.
func TestDLQGroups(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		viewer, op := b.as[api.RoleViewer], b.as[api.RoleOperator]
		// die: a dead letter in queue q whose attempt failed with errText
		// (permanent_error), or ran out of attempts (attempts_exhausted).
		die := func(q, errText string, exhausted bool) {
			t.Helper()
			if _, err := op.Enqueue(ctx, apiclient.Task{Queue: q, Kind: "k", MaxAttempts: 1}); err != nil {
				t.Fatal(err)
			}
			c := claimOne(t, op, q)
			outcome := bt.OutcomePermanentError
			if exhausted {
				outcome = bt.OutcomeTransientError
			}
			if r, err := op.Fail(ctx, c.ID, api.FailRequest{LeaseToken: c.LeaseToken, Outcome: outcome, Error: errText}); err != nil || r.State != bt.StateDead {
				t.Fatalf("fail: %+v %v", r, err)
			}
		}
		for range 3 {
			die("pay", "card declined", false)
		}
		for range 2 {
			die("pay", "timeout <b>", true)
		}
		die("pay", "no such account", false)
		die("mail", "card declined", false)

		g, err := viewer.DLQGroups(ctx, url.Values{"queue": {"pay"}, "status": {"open"}})
		if err != nil {
			t.Fatal(err)
		}
		want := &api.DLQGroups{Total: 6,
			ByReason: []store.GroupCount{{Value: "permanent_error", Count: 4}, {Value: "attempts_exhausted", Count: 2}},
			ByError:  []store.GroupCount{{Value: "card declined", Count: 3}, {Value: "timeout <b>", Count: 2}, {Value: "no such account", Count: 1}}}
		if !reflect.DeepEqual(g, want) {
			t.Fatalf("groups of pay: %+v, want %+v", g, want)
		}
		// Every filter of the list applies; limit bounds the errors.
		g, err = viewer.DLQGroups(ctx, url.Values{"error_contains": {"declined"}, "limit": {"1"}})
		if err != nil || g.Total != 4 || len(g.ByError) != 1 || g.ByError[0] != (store.GroupCount{Value: "card declined", Count: 4}) || g.MoreErrors {
			t.Fatalf("groups of declined: %+v %v", g, err)
		}
		g, err = viewer.DLQGroups(ctx, url.Values{"queue": {"pay"}, "limit": {"2"}})
		if err != nil || g.Total != 6 || len(g.ByError) != 2 || !g.MoreErrors {
			t.Fatalf("groups of pay, 2 errors: %+v %v", g, err)
		}
		g, err = viewer.DLQGroups(ctx, url.Values{"queue": {"none"}})
		if err != nil || g.Total != 0 || len(g.ByReason) != 0 || len(g.ByError) != 0 {
			t.Fatalf("groups of nothing: %+v %v", g, err)
		}
		for _, q := range []url.Values{{"reason": {"bogus"}}, {"limit": {"0"}}, {"limit": {"5000"}}, {"after": {"x"}}, {"nope": {"1"}}, {"status": {"weird"}}} {
			_, err := viewer.DLQGroups(ctx, q)
			if c := problemCode(t, err); c != "invalid_input" && c != "invalid_query" {
				t.Fatalf("groups of %v: %v, want a 400", q, err)
			}
		}
	})
}

// POST /v1/redrives/{id}/cancel stops a running redrive (admin only); the
// same redrive again resumes it and replays the rest, each once.
func TestRedriveCancel(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		viewer, op, admin := b.as[api.RoleViewer], b.as[api.RoleOperator], b.as[api.RoleAdmin]
		for range 6 {
			kill(t, b, apiclient.Task{Queue: "c", Kind: "k"})
		}
		st, err := admin.Redrive(ctx, api.RedriveRequest{Queue: "c", Rate: 2})
		if err != nil || st.Status != "running" {
			t.Fatalf("redrive: %+v %v", st, err)
		}
		_, err = op.CancelRedrive(ctx, st.RedriveID)
		mustCode(t, err, "forbidden")
		got, err := admin.CancelRedrive(ctx, st.RedriveID)
		if err != nil || got.Status != "canceled" || got.FinishedAt == nil || got.Replayed >= 6 {
			t.Fatalf("cancel: %+v %v", got, err)
		}
		if again, err := viewer.RedriveStatus(ctx, st.RedriveID); err != nil || again.Status != "canceled" {
			t.Fatalf("status after cancel: %+v %v", again, err)
		}
		// Canceling a finished redrive answers its status.
		if again, err := admin.CancelRedrive(ctx, st.RedriveID); err != nil || again.Status != "canceled" {
			t.Fatalf("cancel again: %+v %v", again, err)
		}
		_, err = admin.CancelRedrive(ctx, "no-such-redrive")
		mustCode(t, err, "not_found")
		// Resume: the same redrive, the rest replayed.
		res, err := admin.Redrive(ctx, api.RedriveRequest{Queue: "c", Wait: bt.Duration(20 * time.Second)})
		if err != nil || !res.Resumed || res.RedriveID != st.RedriveID || res.Status != "done" || res.Replayed != 6 {
			t.Fatalf("resume: %+v %v", res, err)
		}
	})
}

// GET /v1/activity counts per minute the tasks that succeeded, the
// attempts that failed and the tasks that died, every minute of the window
// listed (zeros filled in), the current one last.
func TestActivity(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		op := b.as[api.RoleOperator]
		for range 2 {
			if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "ok", Kind: "k"}); err != nil {
				t.Fatal(err)
			}
			c := claimOne(t, op, "ok")
			if _, err := op.Complete(ctx, c.ID, api.CompleteRequest{LeaseToken: c.LeaseToken}); err != nil {
				t.Fatal(err)
			}
		}
		kill(t, b, apiclient.Task{Queue: "bad", Kind: "k"})
		// A retried attempt: failed, not dead.
		if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "retry", Kind: "k", MaxAttempts: 5}); err != nil {
			t.Fatal(err)
		}
		c := claimOne(t, op, "retry")
		if _, err := op.Fail(ctx, c.ID, api.FailRequest{LeaseToken: c.LeaseToken, Outcome: bt.OutcomeTransientError, Error: "flaky"}); err != nil {
			t.Fatal(err)
		}

		code, out := b.raw(t, api.RoleViewer, "GET", "/v1/activity?minutes=5", "", "")
		if code != http.StatusOK {
			t.Fatalf("GET /v1/activity: %d %s", code, out)
		}
		var got api.ActivityResponse
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Items) != 5 {
			t.Fatalf("%d minutes, want 5: %s", len(got.Items), out)
		}
		var sum struct{ ok, failed, dead int }
		for i, m := range got.Items {
			sum.ok, sum.failed, sum.dead = sum.ok+m.Succeeded, sum.failed+m.Failed, sum.dead+m.Dead
			if i > 0 && !m.Minute.Equal(got.Items[i-1].Minute.Add(time.Minute)) {
				t.Fatalf("minutes not consecutive: %s", out)
			}
		}
		if now := time.Now().UTC().Truncate(time.Minute); got.Items[4].Minute.Before(now.Add(-time.Minute)) || got.Items[4].Minute.After(now) {
			t.Fatalf("the last minute is %s, want about %s", got.Items[4].Minute, now)
		}
		if sum.ok != 2 || sum.failed != 2 || sum.dead != 1 {
			t.Fatalf("activity: %d succeeded, %d failed, %d dead; want 2, 2, 1: %s", sum.ok, sum.failed, sum.dead, out)
		}
		// Read again after one more success: the closed minutes come from
		// the client's cache, the current one from the store.
		if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "ok", Kind: "k"}); err != nil {
			t.Fatal(err)
		}
		c = claimOne(t, op, "ok")
		if _, err := op.Complete(ctx, c.ID, api.CompleteRequest{LeaseToken: c.LeaseToken}); err != nil {
			t.Fatal(err)
		}
		code, out = b.raw(t, api.RoleViewer, "GET", "/v1/activity?minutes=5", "", "")
		got = api.ActivityResponse{}
		if err := json.Unmarshal(out, &got); code != http.StatusOK || err != nil {
			t.Fatalf("GET /v1/activity again: %d %v %s", code, err, out)
		}
		ok := 0
		for _, m := range got.Items {
			ok += m.Succeeded
		}
		if ok != 3 {
			t.Fatalf("after one more success: %d succeeded, want 3: %s", ok, out)
		}
		if code, out := b.raw(t, api.RoleViewer, "GET", "/v1/activity", "", ""); code != http.StatusOK || strings.Count(string(out), `"minute"`) != 60 {
			t.Fatalf("default window: %d %.200s", code, out)
		}
		for _, q := range []string{"?minutes=0", "?minutes=x", "?minutes=100000", "?nope=1"} {
			if code, out := b.raw(t, api.RoleViewer, "GET", "/v1/activity"+q, "", ""); code != http.StatusBadRequest {
				t.Fatalf("GET /v1/activity%s: %d %s, want 400", q, code, out)
			}
		}
	})
}

// GET /v1/tasks filters by error text, idempotency key and creation time;
// bad times are refused.
func TestTaskListFilters(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		viewer, op := b.as[api.RoleViewer], b.as[api.RoleOperator]
		keyed, err := op.Enqueue(ctx, apiclient.Task{Queue: "f", Kind: "k", IdempotencyKey: "order-7"})
		if err != nil {
			t.Fatal(err)
		}
		dead := kill(t, b, apiclient.Task{Queue: "g", Kind: "k"})
		ids := func(q url.Values) []string {
			t.Helper()
			l, err := viewer.List(ctx, q)
			if err != nil {
				t.Fatalf("list %v: %v", q, err)
			}
			var out []string
			for _, it := range l.Items {
				out = append(out, it.ID)
			}
			return out
		}
		if got := ids(url.Values{"idempotency_key": {"order-7"}}); !slices.Equal(got, []string{keyed.Task.ID}) {
			t.Fatalf("by key: %v", got)
		}
		if got := ids(url.Values{"error_contains": {"declined"}}); !slices.Equal(got, []string{dead}) {
			t.Fatalf("by error: %v", got)
		}
		hourAgo, inHour := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		if got := ids(url.Values{"created_since": {hourAgo}, "created_until": {inHour}}); len(got) != 2 {
			t.Fatalf("created within the hours around now: %v", got)
		}
		if got := ids(url.Values{"created_until": {hourAgo}}); len(got) != 0 {
			t.Fatalf("created an hour ago: %v", got)
		}
		for _, q := range []url.Values{{"created_since": {"yesterday"}}, {"created_since": {inHour}, "created_until": {hourAgo}},
			{"idempotency_key": {"a\x00b"}}} {
			_, err := viewer.List(ctx, q)
			if c := problemCode(t, err); c != "invalid_input" && c != "invalid_query" {
				t.Fatalf("list %v: %v, want a 400", q, err)
			}
		}
	})
}
