package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/filter"
	"github.com/backstophq/backstop/internal/testwait"
)

// The three causes of the end-to-end test's dead letters, by id (i % 10):
// 0-2 the card was declined for tenant acme (the 3,000 the filter selects),
// 3-5 a gateway timeout for acme, 6-9 the card was declined for globex.
func e2eCause(i int) (cause, tenant, errText string) {
	switch i % 10 {
	case 0, 1, 2:
		return "card_declined", "acme", "payment failed: card declined"
	case 3, 4, 5:
		return "gateway_timeout", "acme", "payment failed: gateway timeout"
	}
	return "card_declined", "globex", "payment failed: card declined"
}

// e2eWhere selects the first cause's 3,000; it is within the subset
// evaluated in the database (internal/filter), on both stores.
const e2eWhere = `payload.cause == "card_declined" && attributes.tenant == "acme"`

// TestRedrivesKilledHalfwayThenResumedByID is issue 17's end-to-end proof
// with the real binary on both stores: 10,000 dead letters from three
// causes; a CEL filter (--where) selects exactly one cause's 3,000; a dry
// run shows the count and the sample's diffs and changes nothing; the
// patched redrive is SIGKILLed halfway; while it ran, `redrives resume ID`
// from another process was refused (its runner is alive) and `redrives
// show` said when its runner was last seen; once the runner is stale,
// `backstop redrives resume ID` from another process continues it from its
// cursor with its filter and patch. Then each of the 3,000 but the
// conflicts was replayed exactly once (its history holds one
// dlq.replayed), the other 7,000 are untouched open dead letters, the item
// outcomes add up to 3,000, and `redrives show ID --failed` lists exactly
// the ten that conflicted (a live task holds their idempotency key).
func TestRedrivesKilledHalfwayThenResumedByID(t *testing.T) {
	t.Parallel()
	if x, err := filter.Compile(e2eWhere); err != nil || !x.InSQL() {
		t.Fatalf("%s: not in the SQL subset: %v", e2eWhere, err)
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			const n, selected = 10000, 3000
			url := st.url(t)
			ctx := context.Background()
			start := time.Now()
			s, c := storeClient(t, url)
			params := make([]backstop.EnqueueParams, n)
			errs := make(map[string]string, n)
			for i := range params {
				cause, tenant, errText := e2eCause(i)
				id := fmt.Sprintf("pay-%05d", i)
				params[i] = backstop.EnqueueParams{ID: id, Queue: "pay", Kind: "charge",
					Payload:        json.RawMessage(fmt.Sprintf(`{"cause":%q,"amount":%d}`, cause, i)),
					Attributes:     map[string]string{"tenant": tenant},
					IdempotencyKey: fmt.Sprintf("charge-%d", i)}
				errs[id] = errText
			}
			makeDeadLetters(t, s, c, params, func(id string) string { return errs[id] })
			// Ten conflicts among the selected, spread over the id range: live
			// tasks hold their idempotency keys.
			var conflicts []string
			for j := range 10 {
				i := 300*j + 1 + j%2 // i % 10 is 1 or 2: selected
				conflicts = append(conflicts, fmt.Sprintf("pay-%05d", i))
				if _, err := c.Enqueue(ctx, backstop.EnqueueParams{Queue: "holders", Kind: "charge", IdempotencyKey: fmt.Sprintf("charge-%d", i)}); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("%d dead letters in %s", n, time.Since(start).Round(time.Millisecond))

			// The dry run: the count, a sample with before/after diffs; nothing changes.
			redrive := []string{"--db", url, "dlq", "redrive", "--queue", "pay", "--where", e2eWhere, "--patch", "retried=true"}
			out, err := redriveCmd(append(redrive, "--dry-run", "-o", "json")...).Output()
			if err != nil {
				t.Fatalf("dry run: %v: %s", err, out)
			}
			var dry backstop.RedriveProgress
			if err := json.Unmarshal(out, &dry); err != nil {
				t.Fatalf("dry run: %v: %s", err, out)
			}
			if !dry.DryRun || dry.Preview == nil || dry.Preview.Matched != selected || len(dry.Preview.Sample) != backstop.DefaultRedriveSample {
				t.Fatalf("dry run: %s", out)
			}
			for _, sm := range dry.Preview.Sample {
				var i int
				fmt.Sscanf(sm.ID, "pay-%05d", &i)
				if cause, tenant, _ := e2eCause(i); cause != "card_declined" || tenant != "acme" || sm.Error != errs[sm.ID] {
					t.Fatalf("dry run sampled %+v, which the filter does not select", sm)
				}
				var before, after map[string]any
				if sm.Diff == nil || json.Unmarshal(sm.Diff.Before, &before) != nil || json.Unmarshal(sm.Diff.After, &after) != nil ||
					before["retried"] != nil || after["retried"] != true || after["cause"] != "card_declined" || after["amount"] != before["amount"] ||
					len(sm.Diff.Changes) != 1 || sm.Diff.Changes[0] != (backstop.PayloadChange{Op: "add", Path: "/retried"}) {
					t.Fatalf("dry run diff of %s: %+v", sm.ID, sm.Diff)
				}
			}
			if rs, err := c.Redrives(ctx, "", 10); err != nil || len(rs) != 0 {
				t.Fatalf("the dry run recorded a redrive: %+v %v", rs, err)
			}
			if ts, err := c.List(ctx, backstop.ListParams{Queue: "pay", States: []backstop.State{backstop.StatePending}, Limit: 1}); err != nil || len(ts) != 0 {
				t.Fatalf("the dry run replayed: %v %v", ts, err)
			}

			// The redrive, at 500/s: while it runs, a resume from another
			// process is refused and `redrives show` sees its runner; it
			// is SIGKILLed once half is done.
			refused := false
			last := killRedriveWhen(t, redriveCmd(append(redrive, "--rate", "500", "--yes", "-o", "json")...), func(p backstop.RedriveProgress) bool {
				if p.Replayed >= selected/10 && !refused {
					refused = true
					out, err := redriveCmd("--db", url, "redrives", "resume", p.RedriveID, "--rate", "0").CombinedOutput()
					if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 4 || !strings.Contains(string(out), "running in another process") ||
						!strings.Contains(string(out), "--force") {
						t.Errorf("resume while its runner runs it: %v: %s", err, out)
					}
					show := redrivesShow(t, url, p.RedriveID)
					if !show.RunnerAlive || show.Resumable || show.Runner == "" || show.HeartbeatAt == nil {
						t.Errorf("show while it runs: %+v", show)
					}
					text, err := redriveCmd("--db", url, "redrives", "show", p.RedriveID).Output()
					if err != nil || !strings.Contains(string(text), "running, last seen") || !strings.Contains(string(text), show.Runner) {
						t.Errorf("show (text) while it runs: %v %s", err, text)
					}
				}
				return p.Replayed >= selected/2
			})
			id := last.RedriveID
			if !refused || t.Failed() {
				t.FailNow()
			}
			rec, err := c.GetRedrive(ctx, id)
			if err != nil || rec.Status != "running" || rec.Replayed < selected/2 || rec.Replayed >= selected-10 || rec.Runner == "" {
				t.Fatalf("after the kill: %+v %v", rec, err)
			}
			// Outcomes recorded so far add up to the record's counts.
			if got := rec.Outcomes["replayed"]; got != rec.Replayed {
				t.Fatalf("after the kill: %d replayed items, record says %d", got, rec.Replayed)
			}

			// The killed runner's heartbeat goes stale: then the redrive reads
			// as resumable and another process resumes it.
			testwait.For(t, "the killed runner to go stale", func() bool { return redrivesShow(t, url, id).Resumable })
			text, err := redriveCmd("--db", url, "redrives", "list").Output()
			if err != nil || !strings.Contains(string(text), id) || !strings.Contains(string(text), "no runner seen for") {
				t.Fatalf("list after the kill: %v %s", err, text)
			}
			out, err = redriveCmd("--db", url, "redrives", "resume", id, "--rate", "0").CombinedOutput()
			if err != nil || !strings.Contains(string(out), id) || !strings.Contains(string(out), "resumed, done") {
				t.Fatalf("resume: %v: %s", err, out)
			}
			t.Logf("resume: %s", out)

			out, err = redriveCmd("--db", url, "redrives", "show", id, "--failed", "-o", "json").Output()
			if err != nil {
				t.Fatalf("show: %v: %s", err, out)
			}
			var shown struct {
				Status   string                 `json:"status"`
				Replayed int                    `json:"replayed"`
				Failed   int                    `json:"failed"`
				Runner   string                 `json:"runner"`
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
			if shown.Status != "done" || shown.Replayed != selected-10 || shown.Failed != 10 || !slices.Equal(failedIDs, conflicts) ||
				shown.Outcomes["replayed"]+shown.Outcomes["conflict"] != selected || len(shown.Outcomes) != 2 || shown.Runner != "" {
				t.Fatalf("show --failed: %s", out)
			}
			text, err = redriveCmd("--db", url, "redrives", "show", id, "--failed").Output()
			if err != nil || !strings.Contains(string(text), conflicts[0]) || !strings.Contains(string(text), "conflict") {
				t.Fatalf("show --failed (text): %v %s", err, text)
			}

			// Each selected dead letter but the conflicts was replayed once,
			// with its patch; the other 7,000 are untouched.
			// The history: every dlq.replayed event of the log, by task. The
			// log serves an event once every earlier transaction of the
			// cluster ended (other tests' too): follow it from the cursor
			// until every replay's event is there (a filtered read may come
			// back empty with the cursor moved on).
			replayedEvents := map[string]int{}
			after := ""
			testwait.For(t, fmt.Sprintf("%d dlq.replayed events", selected-10), func() bool {
				for {
					page, err := c.ReadEvents(ctx, backstop.ReadEventsParams{Stream: "type.dlq.replayed", After: after, Limit: 1000})
					if err != nil {
						t.Fatal(err)
					}
					for _, ev := range page.Events {
						replayedEvents[ev.Subject]++
					}
					if page.Next == after {
						return len(replayedEvents) >= selected-10
					}
					after = page.Next
				}
			})
			if len(replayedEvents) != selected-10 {
				t.Fatalf("%d tasks have a dlq.replayed event, want %d", len(replayedEvents), selected-10)
			}
			touched := 0
			eachTask(t, c, backstop.ListParams{Queue: "pay"}, func(task *backstop.Task) {
				var i int
				fmt.Sscanf(task.ID, "pay-%05d", &i)
				cause, tenant, _ := e2eCause(i)
				switch {
				case cause == "card_declined" && tenant == "acme" && !slices.Contains(conflicts, task.ID):
					touched++
					if k := replayedEvents[task.ID]; task.ReplayCount != 1 || k != 1 || task.State != backstop.StatePending {
						t.Fatalf("%s: replay_count %d, %d dlq.replayed events, state %s; want replayed once", task.ID, task.ReplayCount, k, task.State)
					}
				default:
					if task.ReplayCount != 0 || replayedEvents[task.ID] != 0 || task.State != backstop.StateDead || task.DLQStatus != backstop.DLQOpen {
						t.Fatalf("%s (%s, %s): replay_count %d, state %s, dlq %s; want an untouched open dead letter", task.ID, cause, tenant,
							task.ReplayCount, task.State, task.DLQStatus)
					}
				}
			})
			if touched != selected-10 {
				t.Fatalf("%d replayed, want %d", touched, selected-10)
			}
			for _, id := range []string{"pay-00000", "pay-09992"} {
				task, err := c.Get(ctx, id)
				if err != nil || !strings.Contains(string(task.Payload), `"retried":true`) {
					t.Fatalf("%s: not patched: %+v %v", id, task, err)
				}
			}
			// A finished redrive cannot be resumed (exit 4); an unknown one is
			// not found (exit 3).
			err = redriveCmd("--db", url, "redrives", "resume", id).Run()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 4 {
				t.Fatalf("resume of a finished redrive: %v", err)
			}
			err = redriveCmd("--db", url, "redrives", "show", "no-such-redrive").Run()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
				t.Fatalf("show of an unknown redrive: %v", err)
			}
			t.Logf("%s: end to end in %s", st.name, time.Since(start).Round(time.Millisecond))
		})
	}
}

// e2eHeartbeat is the redrive heartbeat of these tests' processes: a
// runner not seen for three of them (3s) is presumed gone.
const e2eHeartbeat = "BACKSTOP_DLQ_REDRIVE_HEARTBEAT=1s"

// redriveCmd is the binary with args and the tests' redrive heartbeat.
func redriveCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), e2eHeartbeat)
	return cmd
}

// redriveShown is `redrives show ID -o json`'s runner part.
type redriveShown struct {
	Status      string     `json:"status"`
	Runner      string     `json:"runner"`
	HeartbeatAt *time.Time `json:"heartbeat_at"`
	RunnerAlive bool       `json:"runner_alive"`
	Resumable   bool       `json:"resumable"`
}

func redrivesShow(t *testing.T, url, id string) redriveShown {
	t.Helper()
	out, err := redriveCmd("--db", url, "redrives", "show", id, "-o", "json").Output()
	var r redriveShown
	if err == nil {
		err = json.Unmarshal(out, &r)
	}
	if err != nil {
		t.Fatalf("redrives show %s: %v: %s", id, err, out)
	}
	return r
}

// killRedriveWhen runs cmd (a `dlq redrive ... -o json`) in its own
// process group and reads its progress lines, each given to kill; when kill
// says so the group is SIGKILLed. It fails the test if the redrive ended
// before that, and returns the last progress read.
func killRedriveWhen(t *testing.T, cmd *exec.Cmd, kill func(backstop.RedriveProgress) bool) backstop.RedriveProgress {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var last backstop.RedriveProgress
	killed := false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
			t.Fatalf("progress line %q: %v", sc.Text(), err)
		}
		if kill(last) {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			killed = true
			break
		}
	}
	_ = cmd.Wait()
	if !killed || last.RedriveID == "" {
		t.Fatalf("the redrive ended before it could be killed (last progress %+v)", last)
	}
	return last
}

// eachTask calls fn on every task f lists, a page at a time.
func eachTask(t *testing.T, c *backstop.Client, f backstop.ListParams, fn func(*backstop.Task)) {
	t.Helper()
	f.Limit = 1000
	for {
		ts, err := c.List(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range ts {
			fn(task)
		}
		if len(ts) < f.Limit {
			return
		}
		f.AfterID = ts[len(ts)-1].ID
	}
}
