package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// TestRedrivesKilledHalfwayThenResumedByID: a patched `dlq redrive` is
// SIGKILLed halfway; `backstop redrives resume ID` from another process
// continues it from its cursor with its filter and patch: each dead letter
// is replayed exactly once, the item outcomes add up to the dead letters,
// and `redrives show ID --failed` lists exactly the ten that conflicted (a
// live task holds their idempotency key).
func TestRedrivesKilledHalfwayThenResumedByID(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			const n = 1000
			url := st.url(t)
			ctx := context.Background()
			s, c := storeClient(t, url)
			params := make([]backstop.EnqueueParams, n)
			for i := range params {
				params[i] = backstop.EnqueueParams{ID: fmt.Sprintf("rk-%05d", i), Queue: "rk", Kind: "job",
					Payload: json.RawMessage(`{"v":1}`), IdempotencyKey: fmt.Sprintf("key-%d", i)}
			}
			if _, err := c.EnqueueMany(ctx, params); err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			got, err := s.Claim(ctx, store.ClaimParams{Queue: "rk", WorkerID: "test", Max: n, Now: now, Lease: time.Minute})
			if err != nil || len(got) != n {
				t.Fatalf("claim: %d %v", len(got), err)
			}
			ss := make([]store.Settlement, len(got))
			for i, task := range got {
				ss[i] = store.Settlement{TaskID: task.ID, ExecutionID: task.ExecutionID, Outcome: bt.OutcomePermanentError,
					Error: "boom", FinishedAt: now, State: bt.StateDead, DeadReason: bt.ReasonPermanentError}
			}
			if _, err := s.Settle(ctx, ss); err != nil {
				t.Fatal(err)
			}
			// Ten conflicts, spread over the id range: live tasks hold their keys.
			var conflicts []string
			for i := 50; i < n; i += 95 {
				id := fmt.Sprintf("rk-%05d", i)
				conflicts = append(conflicts, id)
				if _, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "holders", Kind: "job", IdempotencyKey: fmt.Sprintf("key-%d", i)}); err != nil {
					t.Fatal(err)
				}
			}
			if len(conflicts) != 10 {
				t.Fatalf("%d conflicts", len(conflicts))
			}

			cmd := exec.Command(binary, "--db", url, "dlq", "redrive", "--queue", "rk", "--patch", "fixed=true",
				"--rate", "400", "--yes", "-o", "json")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var id string
			killed := false
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				var p backstop.RedriveProgress
				if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
					t.Fatalf("progress line %q: %v", sc.Text(), err)
				}
				id = p.RedriveID
				if p.Replayed >= n/4 {
					_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
					killed = true
					break
				}
			}
			_ = cmd.Wait()
			if !killed || id == "" {
				t.Fatal("the redrive finished before it could be killed")
			}
			rec, err := c.GetRedrive(ctx, id)
			if err != nil || rec.Status != "running" || rec.Replayed >= n-10 {
				t.Fatalf("after the kill: %+v %v", rec, err)
			}
			// Outcomes recorded so far add up to the record's counts.
			if got := rec.Outcomes["replayed"]; got != rec.Replayed {
				t.Fatalf("after the kill: %d replayed items, record says %d", got, rec.Replayed)
			}

			out, err := exec.Command(binary, "--db", url, "redrives", "resume", id, "--rate", "0").CombinedOutput()
			if err != nil || !strings.Contains(string(out), id) || !strings.Contains(string(out), "resumed, done") {
				t.Fatalf("resume: %v: %s", err, out)
			}
			t.Logf("resume: %s", out)

			out, err = exec.Command(binary, "--db", url, "redrives", "show", id, "--failed", "-o", "json").Output()
			if err != nil {
				t.Fatalf("show: %v: %s", err, out)
			}
			var shown struct {
				Status   string                 `json:"status"`
				Replayed int                    `json:"replayed"`
				Failed   int                    `json:"failed"`
				Outcomes map[string]int         `json:"outcomes"`
				Items    []backstop.RedriveItem `json:"items"`
			}
			if err := json.Unmarshal(out, &shown); err != nil {
				t.Fatalf("show %s: %v", out, err)
			}
			var failedIDs []string
			for _, it := range shown.Items {
				if it.Outcome != "conflict" {
					t.Fatalf("item %+v", it)
				}
				failedIDs = append(failedIDs, it.TaskID)
			}
			if shown.Status != "done" || shown.Replayed != n-10 || shown.Failed != 10 || !slices.Equal(failedIDs, conflicts) ||
				shown.Outcomes["replayed"]+shown.Outcomes["conflict"] != n || len(shown.Outcomes) != 2 {
				t.Fatalf("show --failed: %s", out)
			}
			text, err := exec.Command(binary, "--db", url, "redrives", "show", id, "--failed").Output()
			if err != nil || !strings.Contains(string(text), conflicts[0]) || !strings.Contains(string(text), "conflict") {
				t.Fatalf("show --failed (text): %v %s", err, text)
			}
			after := ""
			for {
				ts, err := c.List(ctx, backstop.ListParams{Queue: "rk", AfterID: after, Limit: 500})
				if err != nil {
					t.Fatal(err)
				}
				for _, task := range ts {
					want := 1
					if slices.Contains(conflicts, task.ID) {
						want = 0
					}
					if task.ReplayCount != want {
						t.Fatalf("%s replayed %d times, want %d", task.ID, task.ReplayCount, want)
					}
				}
				if len(ts) < 500 {
					break
				}
				after = ts[len(ts)-1].ID
			}
			// The list shows it; a finished redrive cannot be resumed (exit 4).
			out, err = exec.Command(binary, "--db", url, "redrives", "list").CombinedOutput()
			if err != nil || !strings.Contains(string(out), id) {
				t.Fatalf("list: %v %s", err, out)
			}
			err = exec.Command(binary, "--db", url, "redrives", "resume", id).Run()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 4 {
				t.Fatalf("resume of a finished redrive: %v", err)
			}
			err = exec.Command(binary, "--db", url, "redrives", "show", "no-such-redrive").Run()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
				t.Fatalf("show of an unknown redrive: %v", err)
			}
		})
	}
}
