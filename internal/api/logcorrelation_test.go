package api_test

import (
	"context"
	"log/slog"
	"testing"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/testlog"
)

// TestLogCorrelation: serve's log lines about a task — its enqueue, its
// claim by a remote worker, the worker's failure report, a release — carry
// the task's correlation attributes (task_id, queue, kind, attempt,
// execution_id, run_id, plan_hash, origin_run_ids), and "tasks claimed"
// names the claimed ids.
func TestLogCorrelation(t *testing.T) {
	stores(t, func(t *testing.T, dbURL func(t *testing.T) string) {
		logs := &testlog.Buffer{}
		b := setup(t, dbURL(t), setupOpts{log: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		ctx := context.Background()
		op := b.as[api.RoleOperator]
		attrs := map[string]string{"run_id": "run-9", "plan_hash": "ph-1", "origin_run_ids": "run-1,run-2"}
		var ids []string
		for range 2 {
			r, err := op.Enqueue(ctx, apiclient.Task{Queue: "lq", Kind: "k", Attributes: attrs})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.Task.ID)
		}
		claimed, err := op.Claim(ctx, api.ClaimRequest{Queues: []string{"lq"}, WorkerID: "w-1", Max: 2})
		if err != nil || len(claimed) != 2 {
			t.Fatalf("claimed %d: %v", len(claimed), err)
		}
		if _, err := op.Fail(ctx, claimed[0].ID, api.FailRequest{LeaseToken: claimed[0].LeaseToken, Outcome: bt.OutcomeTransientError, Error: "boom"}); err != nil {
			t.Fatal(err)
		}
		if _, err := op.Release(ctx, claimed[1].ID, api.ReleaseRequest{LeaseToken: claimed[1].LeaseToken}); err != nil {
			t.Fatal(err)
		}

		seen := map[string]int{}
		for _, rec := range logs.Records(t) {
			msg, _ := rec["msg"].(string)
			switch msg {
			case "task enqueued", "task claimed", "task attempt failed (remote)", "task released":
			case "tasks claimed":
				got, _ := rec["task_ids"].([]any)
				if len(got) != 2 {
					t.Errorf("tasks claimed: task_ids %v, want the 2 claimed", rec["task_ids"])
				}
				seen[msg]++
				continue
			default:
				continue
			}
			seen[msg]++
			for k, v := range attrs {
				if rec[k] != v {
					t.Errorf("%q: %s = %v, want %q (%v)", msg, k, rec[k], v, rec)
				}
			}
			if rec["task_id"] == nil || rec["queue"] != "lq" || rec["kind"] != "k" {
				t.Errorf("%q: task_id, queue, kind missing: %v", msg, rec)
			}
			if msg != "task enqueued" && (rec["attempt"] == nil || rec["execution_id"] == nil) {
				t.Errorf("%q: attempt and execution_id missing: %v", msg, rec)
			}
		}
		for msg, n := range map[string]int{"task enqueued": 2, "tasks claimed": 1, "task claimed": 2, "task attempt failed (remote)": 1, "task released": 1} {
			if seen[msg] != n {
				t.Errorf("%d %q lines, want %d (all: %v)", seen[msg], msg, n, seen)
			}
		}
	})
}
