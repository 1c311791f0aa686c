package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/remote"
	"github.com/backstophq/backstop/store"
)

func problemCode(t *testing.T, err error) string {
	t.Helper()
	var p *api.Problem
	if !errors.As(err, &p) {
		t.Fatalf("want a problem, got %v", err)
	}
	return p.Code
}

func mustCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := problemCode(t, err); got != code {
		t.Fatalf("want problem %s, got %v", code, err)
	}
}

func TestTaskEndpoints(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{})
		ctx := context.Background()
		op := b.as[api.RoleOperator]

		// Enqueue one: 201, the task's JSON.
		res, err := op.Enqueue(ctx, apiclient.Task{Queue: "email", Kind: "send", Payload: json.RawMessage(`{"to":"a@example.com"}`),
			Attributes: map[string]string{"tenant": "acme"}, IdempotencyKey: "k1"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Task.State != bt.StatePending || res.Task.Queue != "email" || res.Merged || res.Duplicate {
			t.Fatalf("enqueue: %+v", res)
		}
		id := res.Task.ID
		// Same idempotency key: the first task comes back, 200.
		dup, err := op.Enqueue(ctx, apiclient.Task{Queue: "email", Kind: "send", IdempotencyKey: "k1"})
		if err != nil || !dup.Duplicate || dup.Task.ID != id {
			t.Fatalf("duplicate: %+v %v", dup, err)
		}
		// Bad input: 400 invalid_input naming the field; nothing written.
		_, err = op.Enqueue(ctx, apiclient.Task{Queue: "bad queue!", Kind: "send"})
		mustCode(t, err, "invalid_input")

		// Batch: all or nothing.
		batch := make([]apiclient.Task, 5)
		for i := range batch {
			batch[i] = apiclient.Task{Queue: "email", Kind: "send", Attributes: map[string]string{"n": fmt.Sprint(i)}}
		}
		br, err := op.EnqueueBatch(ctx, batch)
		if err != nil || len(br.Results) != 5 {
			t.Fatalf("batch: %+v %v", br, err)
		}
		batch[3].MaxAttempts = -1
		_, err = op.EnqueueBatch(ctx, batch)
		var p *api.Problem
		if !errors.As(err, &p) || p.Code != "invalid_input" || p.Index == nil || *p.Index != 3 {
			t.Fatalf("bad batch: want invalid_input at index 3, got %v (%+v)", err, p)
		}

		// Get with executions.
		got, err := b.as[api.RoleViewer].Get(ctx, id)
		if err != nil || got.ID != id || got.Executions == nil {
			t.Fatalf("get: %+v %v", got, err)
		}
		if string(got.Payload) != `{"to":"a@example.com"}` { // key-level masking: nothing secret here
			t.Fatalf("viewer sees payload %s", got.Payload)
		}
		got, _ = b.as[api.RoleAdmin].Get(ctx, id)
		if !strings.Contains(string(got.Payload), "a@example.com") {
			t.Fatalf("admin sees payload %s", got.Payload)
		}
		_, err = op.Get(ctx, "no-such-task")
		mustCode(t, err, "not_found")

		// List with filters and cursor pagination.
		var ids []string
		q := url.Values{"queue": {"email"}, "limit": {"2"}}
		for page := 0; ; page++ {
			l, err := op.List(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range l.Items {
				ids = append(ids, it.ID)
			}
			if l.NextCursor == nil {
				break
			}
			q.Set("after", *l.NextCursor)
			if page > 10 {
				t.Fatal("cursor does not end")
			}
		}
		if len(ids) != 6 || !slices.IsSorted(ids) {
			t.Fatalf("listed %d tasks (%v), want 6 in id order", len(ids), ids)
		}
		l, err := op.List(ctx, url.Values{"attr": {"n=3"}, "state": {"pending,scheduled"}, "kind": {"send"}})
		if err != nil || len(l.Items) != 1 || l.Items[0].Attributes["n"] != "3" {
			t.Fatalf("attr filter: %+v %v", l, err)
		}
		_, err = op.List(ctx, url.Values{"state": {"sleeping"}})
		mustCode(t, err, "invalid_input")
		_, err = op.List(ctx, url.Values{"limit": {"x"}})
		mustCode(t, err, "invalid_query")
		_, err = op.List(ctx, url.Values{"bogus": {"1"}})
		mustCode(t, err, "invalid_query")

		// Queues: counts by state.
		qs, err := b.as[api.RoleViewer].Queues(ctx)
		if err != nil || len(qs.Items) != 1 || qs.Items[0].Name != "email" || qs.Items[0].Counts[bt.StatePending] != 6 || qs.Items[0].Total != 6 {
			t.Fatalf("queues: %+v %v", qs, err)
		}

		// Cancel: a waiting task at once; again is a conflict.
		ct, err := op.Cancel(ctx, id)
		if err != nil || ct.State != bt.StateCanceled {
			t.Fatalf("cancel: %+v %v", ct, err)
		}
		_, err = op.Cancel(ctx, id)
		mustCode(t, err, "conflict")
		_, err = op.Cancel(ctx, "no-such-task")
		mustCode(t, err, "not_found")

		// Health, readiness, OpenAPI.
		for _, path := range []string{"/healthz", "/readyz", "/v1/openapi.json"} {
			if st, body := b.raw(t, api.RoleNone, "GET", path, "", ""); st != 200 {
				t.Fatalf("%s: %d %s", path, st, body)
			}
		}
		if rd := b.srv.Readiness(ctx); !rd.Ready || rd.Store != "ok" {
			t.Fatalf("readiness: %+v", rd)
		}
	})
}

func TestProblems(t *testing.T) {
	t.Parallel()
	b := setup(t, testdbSQLite(t), setupOpts{maxBody: 1024})
	for _, tc := range []struct {
		name, method, path, ct, body string
		status                       int
		code                         string
	}{
		{"unknown route", "GET", "/v1/nope", "", "", 404, "no_such_endpoint"},
		{"wrong method", "DELETE", "/v1/tasks", "", "", 405, "method_not_allowed"},
		{"not json", "POST", "/v1/tasks", "application/json", "not json", 400, "invalid_json"},
		{"unknown key", "POST", "/v1/tasks", "application/json", `{"queue":"q","kind":"k","colour":"red"}`, 400, "invalid_json"},
		{"trailing data", "POST", "/v1/claim", "application/json", `{"queues":["q"],"worker_id":"w"} {}`, 400, "invalid_json"},
		{"wrong type", "POST", "/v1/claim", "application/json", `{"queues":"q","worker_id":"w"}`, 400, "invalid_json"},
		{"media type", "POST", "/v1/tasks", "text/plain", `{}`, 415, "unsupported_media_type"},
		{"body limit", "POST", "/v1/tasks", "application/json", `{"queue":"q","kind":"k","payload":"` + strings.Repeat("x", 2048) + `"}`, 413, "too_large"},
		{"wait too long", "POST", "/v1/claim", "application/json", `{"queues":["q"],"worker_id":"w","wait":"1h"}`, 400, "invalid_input"},
		{"empty batch", "POST", "/v1/tasks/batch", "application/json", `{"tasks":[]}`, 400, "invalid_input"},
	} {
		st, body := b.raw(t, api.RoleAdmin, tc.method, tc.path, tc.ct, tc.body)
		var p api.Problem
		if err := json.Unmarshal(body, &p); err != nil || st != tc.status || p.Code != tc.code || p.Status != st {
			t.Errorf("%s: got %d %s, want %d %s", tc.name, st, body, tc.status, tc.code)
		}
	}
}

func TestPayloadTooLarge(t *testing.T) {
	t.Parallel()
	b := setup(t, testdbSQLite(t), setupOpts{})
	big := `{"queue":"q","kind":"k","payload":"` + strings.Repeat("x", 9<<20) + `"}`
	st, body := b.raw(t, api.RoleOperator, "POST", "/v1/tasks", "application/json", big)
	if st != 413 || !strings.Contains(string(body), `"field":"payload"`) {
		t.Fatalf("oversize payload: %d %.300s", st, body)
	}
}

// TestRoleMatrix calls every authenticated endpoint with no token and with
// each role: 401 without a token, 403 below the endpoint's role, and
// otherwise neither.
func TestRoleMatrix(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{})
		for _, rt := range b.srv.Routes() {
			path := strings.NewReplacer("{id}", "no-such-task", "{name}", "no-such-queue", "{run_id}", "no-such-run", "{execution_id}", "no-such-execution", "{queue}", "no-such-queue").Replace(rt.Path)
			body := ""
			if rt.Method == "POST" {
				body = "{}"
			}
			for _, role := range []api.Role{api.RoleNone, api.RoleViewer, api.RoleOperator, api.RoleAdmin} {
				st, resp := b.raw(t, role, rt.Method, path, "application/json", body)
				var want string
				switch {
				case rt.Role == api.RoleNone:
					want = "allowed"
				case role == api.RoleNone:
					want = "401"
				case role < rt.Role:
					want = "403"
				default:
					want = "allowed"
				}
				got := "allowed"
				if st == 401 || st == 403 {
					got = fmt.Sprint(st)
				}
				if got != want || st >= 500 {
					t.Errorf("%s %s as %s: got %d (%s), want %s", rt.Method, rt.Path, role, st, resp, want)
				}
			}
		}
		// A bad or revoked token is 401 too.
		st, _ := b.rawToken(t, "bst_not-a-real-token", "GET", "/v1/queues")
		if st != 401 {
			t.Errorf("unknown token: %d", st)
		}
		if st, _ := b.rawToken(t, "Basic abc", "GET", "/v1/queues"); st != 401 {
			t.Errorf("malformed token: %d", st)
		}
		if _, err := b.store.(store.Tokens).RevokeToken(context.Background(), "test-viewer", time.Now(), nil); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(api.TokenCacheTTL) // a token looked up is reused that long
		if st, _ := b.raw(t, api.RoleViewer, "GET", "/v1/queues", "", ""); st != 401 {
			t.Errorf("revoked token: %d", st)
		}
	})
}

func claimOne(t *testing.T, c *apiclient.Client, queue string) api.ClaimedTask {
	t.Helper()
	ts, err := c.Claim(context.Background(), api.ClaimRequest{Queues: []string{queue}, WorkerID: "remote-1", Max: 1})
	if err != nil || len(ts) != 1 {
		t.Fatalf("claim: %v %v", ts, err)
	}
	return ts[0]
}

func TestRemoteWorker(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{})
		ctx := context.Background()
		op := b.as[api.RoleOperator]
		for i := range 3 {
			if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "remote", Kind: "k", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)),
				Retry: &bt.RetryPolicy{Schedule: []bt.Duration{bt.Duration(time.Minute)}}}); err != nil {
				t.Fatal(err)
			}
		}
		tasks, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"other", "remote"}, WorkerID: "remote-1", Max: 10, Lease: bt.Duration(10 * time.Second)})
		if err != nil || len(tasks) != 3 {
			t.Fatalf("claim: %d %v", len(tasks), err)
		}
		for _, ct := range tasks {
			// The token is a secret of its own, not the (public) execution id.
			if ct.LeaseToken == "" || ct.ExecutionID == "" || ct.LeaseToken == ct.ExecutionID || ct.State != bt.StateRunning || len(ct.Payload) == 0 {
				t.Fatalf("claimed task: %+v", ct)
			}
		}
		// Nothing left: an empty answer, at once without wait.
		more, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"remote"}, WorkerID: "remote-1"})
		if err != nil || len(more) != 0 {
			t.Fatalf("empty claim: %v %v", more, err)
		}

		hb, err := op.Heartbeat(ctx, tasks[0].ID, api.HeartbeatRequest{LeaseToken: tasks[0].LeaseToken, Lease: bt.Duration(time.Minute)})
		if err != nil || hb.CancelRequested || !hb.LeaseExpiresAt.After(b.clock.Now().Add(50*time.Second)) {
			t.Fatalf("heartbeat: %+v %v", hb, err)
		}
		if _, err := op.Progress(ctx, tasks[0].ID, api.ProgressRequest{LeaseToken: tasks[0].LeaseToken, Progress: &bt.Progress{Total: 4, Completed: 2}}); err != nil {
			t.Fatal(err)
		}
		done, err := op.Complete(ctx, tasks[0].ID, api.CompleteRequest{LeaseToken: tasks[0].LeaseToken})
		if err != nil || done.State != bt.StateSucceeded || done.Outcome != bt.OutcomeSucceeded {
			t.Fatalf("complete: %+v %v", done, err)
		}
		got, _ := op.Get(ctx, tasks[0].ID)
		if got.State != bt.StateSucceeded || got.Progress.Completed != 2 || len(*got.Executions) != 1 || (*got.Executions)[0].WorkerID != "remote-1" {
			t.Fatalf("after complete: %+v %+v", got.Task, got.Executions)
		}

		// Transient: retried by the task's policy (1 minute).
		tr, err := op.Fail(ctx, tasks[1].ID, api.FailRequest{LeaseToken: tasks[1].LeaseToken, Outcome: bt.OutcomeTransientError, Error: "upstream 503"})
		if err != nil || tr.State != bt.StateScheduled || tr.RunAt == nil || tr.RunAt.Sub(b.clock.Now()) < 50*time.Second {
			t.Fatalf("transient: %+v %v", tr, err)
		}
		// Permanent: dead at once.
		pe, err := op.Fail(ctx, tasks[2].ID, api.FailRequest{LeaseToken: tasks[2].LeaseToken, Outcome: bt.OutcomePermanentError, Error: "bad address", ErrorDetail: "stack"})
		if err != nil || pe.State != bt.StateDead || pe.DeadReason != bt.ReasonPermanentError {
			t.Fatalf("permanent: %+v %v", pe, err)
		}
		got, _ = op.Get(ctx, tasks[2].ID)
		if ex := *got.Executions; len(ex) != 1 || ex[0].Outcome != bt.OutcomePermanentError || ex[0].Error != "bad address" || ex[0].ErrorDetail != "stack" {
			t.Fatalf("permanent execution: %+v", ex)
		}
	})
}

func TestRemoteFailRules(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{})
		ctx := context.Background()
		op := b.as[api.RoleOperator]
		enq := func(maxAttempts int) {
			if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "rules", Kind: "k", MaxAttempts: maxAttempts}); err != nil {
				t.Fatal(err)
			}
		}

		// retry_after: snoozed, not charged, like a Go handler's RetryAfter.
		enq(3)
		c := claimOne(t, op, "rules")
		ra := bt.Duration(30 * time.Second)
		r, err := op.Fail(ctx, c.ID, api.FailRequest{LeaseToken: c.LeaseToken, Outcome: bt.OutcomeTransientError, RetryAfter: &ra})
		if err != nil || r.Outcome != bt.OutcomeSnoozed || r.State != bt.StateScheduled {
			t.Fatalf("retry_after: %+v %v", r, err)
		}
		if got, _ := op.Get(ctx, c.ID); got.Attempt != 0 {
			t.Fatalf("snoozed attempt was charged: attempt %d", got.Attempt)
		}
		if _, err := op.Cancel(ctx, c.ID); err != nil {
			t.Fatal(err)
		}

		// Attempts used up: dead, attempts_exhausted.
		enq(1)
		c = claimOne(t, op, "rules")
		r, err = op.Fail(ctx, c.ID, api.FailRequest{LeaseToken: c.LeaseToken, Outcome: bt.OutcomeTimeout})
		if err != nil || r.Outcome != bt.OutcomeTimeout || r.State != bt.StateDead || r.DeadReason != bt.ReasonAttemptsExhausted {
			t.Fatalf("exhausted: %+v %v", r, err)
		}

		// Bad reports change nothing.
		enq(3)
		c = claimOne(t, op, "rules")
		_, err = op.Fail(ctx, c.ID, api.FailRequest{LeaseToken: c.LeaseToken, Outcome: "succeeded"})
		mustCode(t, err, "invalid_input")
		_, err = op.Fail(ctx, c.ID, api.FailRequest{LeaseToken: c.LeaseToken, Outcome: bt.OutcomePermanentError, RetryAfter: &ra})
		mustCode(t, err, "invalid_input")
		_, err = op.Heartbeat(ctx, c.ID, api.HeartbeatRequest{LeaseToken: c.LeaseToken, Progress: &bt.Progress{Total: -1}})
		mustCode(t, err, "invalid_input")
		_, err = op.Claim(ctx, api.ClaimRequest{Queues: []string{"rules"}})
		mustCode(t, err, "invalid_input")
		if got, _ := op.Get(ctx, c.ID); got.State != bt.StateRunning || got.ExecutionID != c.ExecutionID {
			t.Fatalf("bad reports changed the task: %+v", got.Task)
		}
	})
}

// TestLeaseTokenMisuse: only the current lease's token may heartbeat,
// complete or fail; anything else is 409 lease_not_current and changes
// nothing. A worker that dies mid-task loses its lease to the maintenance
// loop, and the task is retried.
func TestLeaseTokenMisuse(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{})
		ctx := context.Background()
		op := b.as[api.RoleOperator]
		if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "lease", Kind: "k", Retry: &bt.RetryPolicy{Schedule: []bt.Duration{0}}}); err != nil {
			t.Fatal(err)
		}
		c := claimOne(t, op, "lease")
		before, _ := op.Get(ctx, c.ID)

		wrong := "0190d5c3-0000-7000-8000-000000000000"
		_, err := op.Heartbeat(ctx, c.ID, api.HeartbeatRequest{LeaseToken: wrong})
		mustCode(t, err, "lease_not_current")
		_, err = op.Progress(ctx, c.ID, api.ProgressRequest{LeaseToken: wrong, Progress: &bt.Progress{Total: 9, Completed: 9}})
		mustCode(t, err, "lease_not_current")
		_, err = op.Complete(ctx, c.ID, api.CompleteRequest{LeaseToken: wrong})
		mustCode(t, err, "lease_not_current")
		_, err = op.Fail(ctx, c.ID, api.FailRequest{LeaseToken: wrong, Outcome: bt.OutcomePermanentError})
		mustCode(t, err, "lease_not_current")
		// The execution id, which any viewer reads, is not the token.
		_, err = op.Complete(ctx, c.ID, api.CompleteRequest{LeaseToken: c.ExecutionID})
		mustCode(t, err, "lease_not_current")
		_, err = op.Complete(ctx, c.ID, api.CompleteRequest{})
		mustCode(t, err, "invalid_input")
		_, err = op.Complete(ctx, "no-such-task", api.CompleteRequest{LeaseToken: c.LeaseToken})
		mustCode(t, err, "not_found")

		after, _ := op.Get(ctx, c.ID)
		if after.State != bt.StateRunning || after.ExecutionID != c.ExecutionID || after.Attempt != before.Attempt ||
			!after.LeaseExpiresAt.Equal(*before.LeaseExpiresAt) || after.Progress != before.Progress || len(*after.Executions) != 0 {
			t.Fatalf("misuse changed the task:\nbefore %+v\nafter  %+v", before.Task, after.Task)
		}

		// The worker dies: its lease expires and maintenance settles it.
		b.clock.Advance(remote.DefaultLease + time.Second)
		if err := backstop.Maintain(ctx, b.lib); err != nil {
			t.Fatal(err)
		}
		_, err = op.Complete(ctx, c.ID, api.CompleteRequest{LeaseToken: c.LeaseToken})
		mustCode(t, err, "lease_not_current")
		again := claimOne(t, op, "lease")
		if again.ID != c.ID || again.LeaseToken == c.LeaseToken || again.Attempt != 2 {
			t.Fatalf("retry after lease expiry: %+v", again)
		}
		if _, err := op.Complete(ctx, again.ID, api.CompleteRequest{LeaseToken: again.LeaseToken}); err != nil {
			t.Fatal(err)
		}
		// Settling twice is a conflict too.
		_, err = op.Complete(ctx, again.ID, api.CompleteRequest{LeaseToken: again.LeaseToken})
		mustCode(t, err, "lease_not_current")
		got, _ := op.Get(ctx, c.ID)
		ex := *got.Executions
		if got.State != bt.StateSucceeded || len(ex) != 2 || ex[0].Outcome != bt.OutcomeLeaseExpired || ex[1].Outcome != bt.OutcomeSucceeded {
			t.Fatalf("history: %+v %+v", got.Task, ex)
		}
	})
}

// TestCancelReachesRemoteWorker: an operator's cancel shows on the next
// heartbeat, and whatever the worker reports then, the task ends canceled.
// TestCancelReachesRemoteWorker: a heartbeat answers cancel_requested once
// the task was canceled; any failure the worker then reports ends the task
// canceled (outcome canceled, or any other: a permanent error is not a dead
// letter), and a success it reports (the work finished first) is recorded
// as succeeded.
func TestCancelReachesRemoteWorker(t *testing.T) {
	t.Parallel()
	b := setup(t, testdbSQLite(t), setupOpts{})
	ctx := context.Background()
	op := b.as[api.RoleOperator]
	for _, tc := range []struct {
		outcome bt.Outcome // "" completes
		want    bt.State
	}{
		{bt.OutcomeTransientError, bt.StateCanceled},
		{bt.OutcomePermanentError, bt.StateCanceled},
		{bt.OutcomeCanceled, bt.StateCanceled},
		{"", bt.StateSucceeded},
	} {
		if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "c", Kind: "k"}); err != nil {
			t.Fatal(err)
		}
		c := claimOne(t, op, "c")
		if _, err := op.Cancel(ctx, c.ID); err != nil {
			t.Fatal(err)
		}
		hb, err := op.Heartbeat(ctx, c.ID, api.HeartbeatRequest{LeaseToken: c.LeaseToken})
		if err != nil || !hb.CancelRequested {
			t.Fatalf("heartbeat after cancel: %+v %v", hb, err)
		}
		var r *api.SettleResponse
		if tc.outcome == "" {
			r, err = op.Complete(ctx, c.ID, api.CompleteRequest{LeaseToken: c.LeaseToken})
		} else {
			r, err = op.Fail(ctx, c.ID, api.FailRequest{LeaseToken: c.LeaseToken, Outcome: tc.outcome})
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.outcome, err)
		}
		if got, _ := op.Get(ctx, c.ID); got.State != tc.want {
			t.Errorf("after cancel and %q: %s, want %s (result %+v)", tc.outcome, got.State, tc.want, r)
		}
	}
	// Without a cancel, outcome canceled is still a cancel of the attempt.
	if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "c", Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	c := claimOne(t, op, "c")
	if _, err := op.Fail(ctx, c.ID, api.FailRequest{LeaseToken: c.LeaseToken, Outcome: bt.OutcomeCanceled}); err != nil {
		t.Fatal(err)
	}
	if got, _ := op.Get(ctx, c.ID); got.State != bt.StateCanceled {
		t.Errorf("outcome canceled without a cancel: %s", got.State)
	}
}

func TestLongPoll(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{})
		ctx := context.Background()
		op := b.as[api.RoleOperator]

		// Nothing arrives: the claim waits out its wait and answers empty.
		start := time.Now()
		ts, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"lp"}, WorkerID: "w", Wait: bt.Duration(300 * time.Millisecond)})
		if err != nil || len(ts) != 0 || time.Since(start) < 300*time.Millisecond {
			t.Fatalf("empty long poll: %v %v after %s", ts, err, time.Since(start))
		}

		// An enqueue wakes a waiting claim (the poll fallback is 5s here).
		type result struct {
			ts  []api.ClaimedTask
			err error
			at  time.Time
		}
		got := make(chan result, 1)
		waiting := claimWaits(b)
		go func() {
			ts, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"lp"}, WorkerID: "w", Wait: bt.Duration(20 * time.Second)})
			got <- result{ts, err, time.Now()}
		}()
		<-waiting // the claim found nothing and waits
		enqueued := time.Now()
		if _, err := op.Enqueue(ctx, apiclient.Task{Queue: "lp", Kind: "k"}); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.err != nil || len(r.ts) != 1 {
			t.Fatalf("woken claim: %v %v", r.ts, r.err)
		}
		if d := r.at.Sub(enqueued); d > 3*time.Second {
			t.Fatalf("the claim took %s after the enqueue: it was not woken", d)
		}

		// Shutdown ends waiting claims at once.
		go func() {
			ts, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"none"}, WorkerID: "w", Wait: bt.Duration(20 * time.Second)})
			got <- result{ts, err, time.Now()}
		}()
		<-waiting
		closed := time.Now()
		b.srv.Close()
		r = <-got
		if r.err != nil || len(r.ts) != 0 || r.at.Sub(closed) > 3*time.Second {
			t.Fatalf("claim during shutdown: %v %v after %s", r.ts, r.err, r.at.Sub(closed))
		}
	})
}

// TestDevAnonymousAdmin: with AnonymousAdmin, requests without a token are
// admin; a bad token is still refused.
func TestDevAnonymousAdmin(t *testing.T) {
	t.Parallel()
	b := setup(t, testdbSQLite(t), setupOpts{anonymousAdmin: true})
	if st, body := b.raw(t, api.RoleNone, "POST", "/v1/tasks", "application/json", `{"queue":"q","kind":"k"}`); st != http.StatusCreated {
		t.Fatalf("anonymous enqueue: %d %s", st, body)
	}
	if st, _ := b.rawToken(t, "bst_wrong", "GET", "/v1/queues"); st != 401 {
		t.Fatalf("bad token with --dev: %d", st)
	}
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, testdbSQLite(t), setupOpts{rateLimit: 1})
	var codes []int
	for range 5 {
		st, _ := b.raw(t, api.RoleViewer, "GET", "/v1/queues", "", "")
		codes = append(codes, st)
	}
	if !slices.Contains(codes, http.StatusTooManyRequests) || codes[0] != 200 {
		t.Fatalf("rate limit 1/s (burst 2): statuses %v", codes)
	}
	// Another token has its own budget.
	if st, _ := b.raw(t, api.RoleOperator, "GET", "/v1/queues", "", ""); st != 200 {
		t.Fatalf("other token limited too: %d", st)
	}
}

// TestOpenAPICoversRoutes: every registered route is documented, and every
// documented operation is registered.
func TestOpenAPICoversRoutes(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	b := setup(t, testdbSQLite(t), setupOpts{})
	registered := map[string]bool{}
	for _, rt := range b.srv.Routes() {
		key := rt.Method + " " + rt.Path
		registered[key] = true
		item := doc.Paths.Find(rt.Path)
		if item == nil || item.GetOperation(rt.Method) == nil {
			t.Errorf("route %s is not in openapi.json", key)
			continue
		}
		if role, _ := item.GetOperation(rt.Method).Extensions["x-backstop-role"].(string); role != rt.Role.String() {
			t.Errorf("route %s: openapi.json says role %q, the server %q", key, role, rt.Role)
		}
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if !registered[method+" "+path] {
				t.Errorf("openapi.json documents %s %s, which the server does not serve", method, path)
			}
		}
	}
	// Every problem code is in the document's enum.
	enum := doc.Components.Schemas["Problem"].Value.Properties["code"].Value.Enum
	for _, c := range api.ProblemCodes {
		if !slices.Contains(enum, any(c.Code)) {
			t.Errorf("problem code %s is not documented", c.Code)
		}
	}
}

// TestConcurrentCompletes: many remote workers settle at once (the library
// batches their settlements); each task is settled exactly once even when
// its completion is sent twice concurrently.
func TestConcurrentCompletes(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		op := b.as[api.RoleOperator]
		const n = 40
		batch := make([]apiclient.Task, n)
		for i := range batch {
			batch[i] = apiclient.Task{Queue: "cc", Kind: "k"}
		}
		if _, err := op.EnqueueBatch(ctx, batch); err != nil {
			t.Fatal(err)
		}
		ts, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"cc"}, WorkerID: "w", Max: n})
		if err != nil || len(ts) != n {
			t.Fatalf("claim: %d %v", len(ts), err)
		}
		type res struct {
			id   string
			ok   bool
			code string
		}
		results := make(chan res, 2*n)
		var wg sync.WaitGroup
		for _, ct := range ts {
			for range 2 {
				wg.Go(func() {
					_, err := op.Complete(ctx, ct.ID, api.CompleteRequest{LeaseToken: ct.LeaseToken})
					r := res{id: ct.ID, ok: err == nil}
					if err != nil {
						r.code = problemCode(t, err)
					}
					results <- r
				})
			}
		}
		wg.Wait()
		close(results)
		wins := map[string]int{}
		for r := range results {
			if r.ok {
				wins[r.id]++
			} else if r.code != "lease_not_current" {
				t.Errorf("task %s: %s", r.id, r.code)
			}
		}
		for _, ct := range ts {
			if wins[ct.ID] != 1 {
				t.Errorf("task %s completed %d times", ct.ID, wins[ct.ID])
			}
			got, _ := op.Get(ctx, ct.ID)
			if got.State != bt.StateSucceeded || len(*got.Executions) != 1 {
				t.Errorf("task %s: %s with %d executions", ct.ID, got.State, len(*got.Executions))
			}
		}
	})
}
