package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// The lease-secret tests speak plain HTTP (no client types), so that they
// run unchanged against any version of the server.

// call sends one request with a bearer secret and returns status and body.
func (b *bundle) call(t *testing.T, secret, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, b.ts.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := b.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// must is call that wants 200 (or 201) and decodes the answer into out.
func (b *bundle) must(t *testing.T, secret, method, path string, body, out any) {
	t.Helper()
	code, raw := b.call(t, secret, method, path, body)
	if code != http.StatusOK && code != http.StatusCreated {
		t.Fatalf("%s %s: %d %s", method, path, code, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, raw)
		}
	}
}

type claimedLease struct {
	ID          string `json:"id"`
	ExecutionID string `json:"execution_id"`
	LeaseToken  string `json:"lease_token"`
}

func (b *bundle) claimLease(t *testing.T, secret, queue string) claimedLease {
	t.Helper()
	var res struct {
		Tasks []claimedLease `json:"tasks"`
	}
	b.must(t, secret, "POST", "/v1/claim", map[string]any{"queues": []string{queue}, "worker_id": "worker-a"}, &res)
	if len(res.Tasks) != 1 || res.Tasks[0].LeaseToken == "" {
		t.Fatalf("claim: %+v", res)
	}
	return res.Tasks[0]
}

// jsonStrings appends every string value (and object key) of a JSON
// document; a body that is not JSON is taken line by line.
func jsonStrings(raw []byte, out map[string]bool) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		for _, l := range strings.Split(string(raw), "\n") {
			out[l] = true
		}
		return
	}
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			out[x] = true
			// A string holding JSON (an event's body as text): its strings too.
			if strings.HasPrefix(x, "{") || strings.HasPrefix(x, "[") {
				jsonStrings([]byte(x), out)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for k, e := range x {
				out[k] = true
				walk(e)
			}
		}
	}
	walk(v)
}

// TestLeaseTokenIsSecret (issue 13, item 2): a lease token is a secret of
// the lease holder. Token A claims a task (after a first attempt, so the
// task has history: executions, events, logs); then everything a viewer,
// or a second operator token B, can read about the task is collected.
// (1) A's lease token appears in none of it; (2) every string found there,
// tried as lease_token by B on heartbeat, progress, complete, fail,
// release, logs and batch complete, is refused with 409 and changes
// nothing; and A's real token still completes the task.
func TestLeaseTokenIsSecret(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{})
		ctx := context.Background()
		a := b.secret[api.RoleOperator]
		viewer := b.secret[api.RoleViewer]
		secB, _, err := api.CreateToken(ctx, b.store.(store.Tokens), "operator-b", api.RoleOperator, time.Now())
		if err != nil {
			t.Fatal(err)
		}

		var enq struct {
			Task struct {
				ID string `json:"id"`
			} `json:"task"`
		}
		b.must(t, a, "POST", "/v1/tasks", map[string]any{"queue": "secret", "kind": "k", "payload": map[string]any{"n": 1},
			"attributes": map[string]string{"tenant": "t1"}, "retry": map[string]any{"schedule": []string{"0s"}}}, &enq)
		id := enq.Task.ID
		// A first attempt that fails, so that the task has an execution.
		first := b.claimLease(t, a, "secret")
		b.must(t, a, "POST", "/v1/tasks/"+id+"/logs", map[string]any{"lease_token": first.LeaseToken,
			"lines": []map[string]string{{"line": "first attempt"}}}, nil)
		b.must(t, a, "POST", "/v1/tasks/"+id+"/fail", map[string]any{"lease_token": first.LeaseToken,
			"outcome": "transient_error", "error": "try again"}, nil)
		// The lease under test, with progress and a log of its own.
		l := b.claimLease(t, a, "secret")
		if l.ID != id {
			t.Fatalf("claimed %s, want %s", l.ID, id)
		}
		b.must(t, a, "POST", "/v1/tasks/"+id+"/heartbeat", map[string]any{"lease_token": l.LeaseToken,
			"progress": map[string]int{"total_steps": 4, "completed_steps": 1}, "worker_id": "worker-a"}, nil)
		b.must(t, a, "POST", "/v1/tasks/"+id+"/logs", map[string]any{"lease_token": l.LeaseToken,
			"lines": []map[string]string{{"line": "working"}, {"stream": "log", "line": "step 1"}}}, nil)

		reads := []string{
			"/v1/tasks/" + id,
			"/v1/tasks?queue=secret",
			"/v1/tasks?state=running",
			"/v1/tasks?attr=tenant%3Dt1",
			"/v1/events?stream=" + url.QueryEscape("task."+id),
			"/v1/events?stream=" + url.QueryEscape("queue.secret"),
			"/v1/events",
			"/v1/tasks/" + id + "/executions/" + first.ExecutionID + "/logs",
			"/v1/tasks/" + id + "/executions/" + first.ExecutionID + "/logs?format=text",
			"/v1/tasks/" + id + "/executions/" + l.ExecutionID + "/logs",
			"/v1/tasks/" + id + "/executions/" + l.ExecutionID + "/logs?format=text",
			"/v1/workers",
			"/v1/workers/worker-a",
			"/v1/queues",
		}
		seen := map[string]bool{}
		for _, who := range []string{viewer, secB} {
			for _, p := range reads {
				code, body := b.call(t, who, "GET", p, nil)
				if code != http.StatusOK {
					t.Fatalf("GET %s: %d %s", p, code, body)
				}
				// (1) The token is nowhere, whole or in part.
				if strings.Contains(string(body), l.LeaseToken) {
					t.Errorf("GET %s shows the lease token %q:\n%.800s", p, l.LeaseToken, body)
				}
				if i := strings.LastIndexByte(l.LeaseToken, '.'); i >= 0 && strings.Contains(string(body), l.LeaseToken[i+1:]) {
					t.Errorf("GET %s shows the lease token's secret part", p)
				}
				jsonStrings(body, seen)
			}
		}
		if !seen[l.ExecutionID] || !seen[id] {
			t.Fatalf("the reads did not show the task and its execution: %d strings", len(seen))
		}

		// (2) Every string a reader saw, as B's lease token: 409, never 200.
		var candidates []string
		for s := range seen {
			if s != "" && len(s) < 4096 {
				candidates = append(candidates, s)
			}
		}
		slices.Sort(candidates)
		if len(candidates) < 30 {
			t.Fatalf("only %d strings collected: the reads are not what they should be", len(candidates))
		}
		t.Logf("trying %d strings that readers saw as B's lease token, on 7 endpoints each", len(candidates))
		base := "/v1/tasks/" + id
		for _, s := range candidates {
			for _, try := range []struct {
				path string
				body map[string]any
			}{
				{base + "/heartbeat", map[string]any{"lease_token": s}},
				{base + "/progress", map[string]any{"lease_token": s, "progress": map[string]int{"total_steps": 9, "completed_steps": 9}}},
				{base + "/complete", map[string]any{"lease_token": s}},
				{base + "/fail", map[string]any{"lease_token": s, "outcome": "permanent_error", "error": "hijacked"}},
				{base + "/release", map[string]any{"lease_token": s}},
				{base + "/logs", map[string]any{"lease_token": s, "lines": []map[string]string{{"line": "hijacked"}}}},
			} {
				code, body := b.call(t, secB, "POST", try.path, try.body)
				if code != http.StatusConflict {
					t.Fatalf("B: POST %s with lease_token %q: %d %s, want 409", try.path, s, code, body)
				}
			}
			var batch struct {
				Results []struct {
					Result  json.RawMessage `json:"result"`
					Problem *struct {
						Status int `json:"status"`
					} `json:"problem"`
				} `json:"results"`
			}
			b.must(t, secB, "POST", "/v1/tasks/complete", map[string]any{"completions": []map[string]string{{"task_id": id, "lease_token": s}}}, &batch)
			if len(batch.Results) != 1 || batch.Results[0].Problem == nil || batch.Results[0].Problem.Status != http.StatusConflict {
				t.Fatalf("B: batch complete with lease_token %q: %+v, want a 409 problem", s, batch)
			}
		}

		// Nothing B tried changed the task, and A still holds the lease.
		var got struct {
			State       string `json:"state"`
			ExecutionID string `json:"execution_id"`
			Progress    struct {
				Total int `json:"total_steps"`
			} `json:"progress"`
		}
		b.must(t, viewer, "GET", base, nil, &got)
		if got.State != "running" || got.ExecutionID != l.ExecutionID || got.Progress.Total != 4 {
			t.Fatalf("after B's attempts: %+v", got)
		}
		code, logs := b.call(t, viewer, "GET", base+"/executions/"+l.ExecutionID+"/logs?format=text", nil)
		if code != http.StatusOK || strings.Contains(string(logs), "hijacked") {
			t.Fatalf("B wrote to the log: %d %s", code, logs)
		}
		var done struct {
			State string `json:"state"`
		}
		b.must(t, a, "POST", base+"/complete", map[string]any{"lease_token": l.LeaseToken}, &done)
		if done.State != "succeeded" {
			t.Fatalf("A's complete: %+v", done)
		}
	})
}

// TestRemoteSettlementActor: the events of a remote complete and a remote
// fail (and of the heartbeat's progress) name the API token that reported
// them.
func TestRemoteSettlementActor(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{})
		a := b.secret[api.RoleOperator]
		ids := map[string]string{}
		for _, name := range []string{"ok", "bad"} {
			var enq struct {
				Task struct {
					ID string `json:"id"`
				} `json:"task"`
			}
			b.must(t, a, "POST", "/v1/tasks", map[string]any{"queue": "actor-" + name, "kind": "k", "max_attempts": 1}, &enq)
			ids[name] = enq.Task.ID
		}
		ok := b.claimLease(t, a, "actor-ok")
		b.must(t, a, "POST", "/v1/tasks/"+ok.ID+"/progress", map[string]any{"lease_token": ok.LeaseToken,
			"progress": map[string]int{"total_steps": 2, "completed_steps": 1}}, nil)
		b.must(t, a, "POST", "/v1/tasks/"+ok.ID+"/complete", map[string]any{"lease_token": ok.LeaseToken}, nil)
		bad := b.claimLease(t, a, "actor-bad")
		b.must(t, a, "POST", "/v1/tasks/"+bad.ID+"/fail", map[string]any{"lease_token": bad.LeaseToken,
			"outcome": "permanent_error", "error": "no"}, nil)

		want := map[string][]string{
			"ok":  {"task.progress", "task.started", "task.succeeded"},
			"bad": {"task.started", "task.failed", "task.dead_lettered"},
		}
		for name, types := range want {
			type event struct {
				Type  string `json:"type"`
				Actor string `json:"actor"`
			}
			var page struct { // {events, next} or, like every other list, {items, next_cursor}
				Events []event `json:"events"`
				Items  []event `json:"items"`
			}
			// The log serves an event once no earlier transaction can still
			// commit (on Postgres, cluster-wide): poll until all are there.
			got := map[string]string{}
			testwait.For(t, "the events of task "+name, func() bool {
				page.Events, page.Items = nil, nil
				b.must(t, b.secret[api.RoleViewer], "GET", "/v1/events?stream="+url.QueryEscape("task."+ids[name]), nil, &page)
				for _, e := range append(page.Events, page.Items...) {
					got[e.Type] = e.Actor
				}
				return len(got) >= len(types)+2 // + enqueued, claimed
			})
			for _, typ := range types {
				if a, found := got[typ]; !found || a != "test-operator" {
					t.Errorf("%s: %s actor %q (present %v), want test-operator; events %s", name, typ, a, found, fmt.Sprint(got))
				}
			}
		}
	})
}
