package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
)

// TestTasksBulkActions: `tasks cancel|run-now|delete|reprioritize` by ID
// and by a selection, on the database and over --server: each bad input
// exits 2 naming the problem with nothing changed; a dry run counts and
// samples and changes nothing; more than --confirm-over without a
// terminal needs --yes; the action changes each selected task once; an ID
// the action cannot change exits 4 (3 when unknown).
func TestTasksBulkActions(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		r := newRemoteEnv(t, e, "admin")
		for _, side := range []string{"l", "r"} {
			for i := range 6 {
				e.ok("enqueue", "--queue", "tb", "--kind", "k", "--id", fmt.Sprintf("t%d-%s", i, side), "--attr", "side="+side,
					"--delay", "1h", "--payload", fmt.Sprintf(`{"bad":%t}`, i < 4))
			}
		}
		all := "t0-l,t0-r,t1-l,t1-r,t2-l,t2-r,t3-l,t3-r,t4-l,t4-r,t5-l,t5-r"
		for _, bad := range []struct {
			want string
			args []string
		}{
			{"--all, alone", []string{"tasks", "cancel", "--reason", "x"}},
			{"--all, alone", []string{"tasks", "run-now"}},
			{"not both", []string{"tasks", "delete", "t0-l", "--queue", "tb", "--reason", "x"}},
			{"cannot be narrowed by --queue", []string{"tasks", "cancel", "--all", "--queue", "tb"}},
			{"--where", []string{"tasks", "cancel", "--where", "payload.bad ==", "--yes"}},
			{"--reason is required", []string{"tasks", "delete", "--queue", "tb", "--yes"}},
			{"--priority is required", []string{"tasks", "reprioritize", "--queue", "tb", "--yes"}},
			{"--priority 40000", []string{"tasks", "reprioritize", "--queue", "tb", "--priority", "40000", "--yes"}},
			{"--state running", []string{"tasks", "delete", "--state", "running", "--reason", "x", "--yes"}},
			{"--until", []string{"tasks", "run-now", "--queue", "tb", "--until", "soon"}},
			{"--confirm-over 5", []string{"tasks", "run-now", "--queue", "tb"}},
		} {
			if strings.HasPrefix(bad.want, "--confirm-over") {
				bad.args = append(bad.args, "--confirm-over", "5")
			}
			e.fails(ExitUsage, bad.want, bad.args...)
			if rem := r.remote("", bad.args...); rem.code != ExitUsage || !strings.Contains(rem.stderr, bad.want) {
				t.Fatalf("--server %v: exit %d %q", bad.args, rem.code, rem.stderr)
			}
		}
		if ids := strings.Join(e.listIDs("--state", "scheduled"), ","); ids != all {
			t.Fatalf("scheduled after the refusals: %s", ids)
		}
		// The same selection of each side, on the database and over the
		// server: the same output.
		both := func(args ...string) string {
			t.Helper()
			with := func(side string) []string { return append([]string{"tasks"}, append(args, "--attr", "side="+side)...) }
			l, rem := e.run("", with("l")...), r.remote("", with("r")...)
			if ln, rn := normalize(l.stdout, ""), normalize(rem.stdout, ""); l.code != 0 || rem.code != 0 || ln != rn {
				t.Fatalf("backstop tasks %v: --db exit %d\n%s%s\n--server exit %d\n%s%s", args, l.code, l.stdout, l.stderr,
					rem.code, rem.stdout, rem.stderr)
			}
			return l.stdout
		}
		out := both("delete", "--where", "payload.bad == true", "--reason", "bad deploy", "--dry-run", "--sample", "2")
		if !strings.Contains(out, "would delete 4 tasks") || !strings.Contains(out, "t0-l") || strings.Contains(out, "t2-l") {
			t.Fatalf("dry run:\n%s", out)
		}
		if ids := strings.Join(e.listIDs("--state", "scheduled"), ","); ids != all {
			t.Fatalf("scheduled after the dry runs: %s", ids)
		}
		both("run-now", "--where", "payload.bad == false", "--yes")
		if ids := strings.Join(e.listIDs("--state", "pending"), ","); ids != "t4-l,t4-r,t5-l,t5-r" {
			t.Fatalf("pending after run-now: %s", ids)
		}
		out = both("delete", "--where", "payload.bad == true", "--state", "scheduled", "--reason", "bad deploy", "--yes")
		if !strings.Contains(out, "delete: 4 tasks") {
			t.Fatalf("delete:\n%s", out)
		}
		if ids := strings.Join(e.listIDs("--queue", "tb"), ","); ids != "t4-l,t4-r,t5-l,t5-r" {
			t.Fatalf("left after delete: %s", ids)
		}
		both("reprioritize", "--state", "pending", "--priority", "9", "--yes")
		var shown taskOut
		e.json(&shown, "tasks", "show", "t4-r")
		if shown.Priority != 9 {
			t.Fatalf("t4-r's priority: %d", shown.Priority)
		}
		// By ID: one that cannot be changed is a conflict; an unknown one is not found.
		e.ok("tasks", "cancel", "t5-l", "t5-r", "--reason", "enough")
		e.fails(ExitConflict, "is canceled", "tasks", "run-now", "t5-l")
		if rem := r.remote("", "tasks", "run-now", "t5-r"); rem.code != ExitConflict {
			t.Fatalf("--server run-now of a canceled task: exit %d %s", rem.code, rem.stderr)
		}
		e.fails(ExitNotFound, "t9-x", "tasks", "reprioritize", "t9-x", "--priority", "1")
		e.ok("tasks", "cancel", "t4-l") // one ID, as before: the single cancel
	})
}

// TestTasksBulk10000Postgres is riverui#590's scenario: 10,000 queued bad
// tasks among good ones cleared by one `tasks delete --where` on
// PostgreSQL, then the same for cancel: every bad task changed exactly
// once (its state, its outcome on the job), with exactly one event of the
// action naming the job (every deleted task's history read; every tenth
// canceled one's), and no good task touched.
func TestTasksBulk10000Postgres(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("10,000 tasks")
	}
	e := &cliEnv{t: t, db: testdb.Postgres(t)}
	e.ok("migrate")
	ctx := context.Background()
	st, err := dburl.Open(ctx, e.db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c, err := backstop.NewClient(st, &backstop.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	const bad, good = 10000, 200
	enqueue := func(kind string, n int, isBad bool) []string {
		ps := make([]backstop.EnqueueParams, n)
		for i := range ps {
			ps[i] = backstop.EnqueueParams{Queue: "riverui590", Kind: kind, Payload: json.RawMessage(fmt.Sprintf(`{"bad":%t,"n":%d}`, isBad, i))}
		}
		var ids []string
		for i := 0; i < n; i += 1000 {
			res, err := c.EnqueueMany(ctx, ps[i:min(i+1000, n)])
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				ids = append(ids, r.Task.ID)
			}
		}
		return ids
	}
	check := func(action, eventType, outcome, jobID, kind string, ids []string) {
		t.Helper()
		defer func(start time.Time) { t.Logf("%s: checked in %s", action, time.Since(start).Round(time.Millisecond)) }(time.Now())
		// Each task's history in ids: exactly one event of the action,
		// naming the job and its reason (read by 8 readers at once).
		var mu sync.Mutex
		var wrong []string
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := w; i < len(ids); i += 8 {
					evs, err := c.Events(ctx, ids[i])
					n := 0
					for _, ev := range evs {
						var body map[string]any
						_ = json.Unmarshal(ev.Body, &body)
						if ev.Type == eventType && body["job_id"] == jobID && body["reason"] != "" {
							n++
						} else if ev.Type == eventType {
							n += 100
						}
					}
					if err != nil || n != 1 {
						mu.Lock()
						wrong = append(wrong, fmt.Sprintf("%s: %d %s events (%v)", ids[i], n, eventType, err))
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		if len(wrong) > 0 {
			t.Fatalf("%s: %d of %d tasks without exactly one %s event of job %s, e.g. %s", action, len(wrong), len(ids), eventType, jobID, wrong[0])
		}
		rec, err := c.GetRedrive(ctx, jobID)
		if err != nil || rec.Status != backstop.RedriveDone || rec.Replayed != bad || rec.Failed != 0 || rec.Outcomes[outcome] != bad {
			t.Fatalf("%s: the job's record: %+v %v", action, rec, err)
		}
		goods, err := c.List(ctx, backstop.ListParams{Queue: "riverui590", Kind: kind + "-good", Limit: 10000})
		if err != nil || len(goods) != good {
			t.Fatalf("%s: %d good tasks left, %v", action, len(goods), err)
		}
		for _, g := range goods {
			if g.State != bt.StatePending {
				t.Fatalf("%s touched good task %s: %s", action, g.ID, g.State)
			}
		}
	}
	run := func(args ...string) string {
		t.Helper()
		start := time.Now()
		var sum struct {
			RedriveID string `json:"redrive_id"`
			Changed   int    `json:"changed"`
			Done      bool   `json:"done"`
		}
		out := e.ok(append(args, "--yes", "-o", "json")...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil || !sum.Done || sum.Changed != bad {
			t.Fatalf("backstop %v: %+v %v\n%s", args, sum, err, out)
		}
		t.Logf("backstop %s: %d tasks in %s", strings.Join(args[:2], " "), sum.Changed, time.Since(start).Round(time.Millisecond))
		return sum.RedriveID
	}

	start := time.Now()
	ids := enqueue("del", bad, true)
	t.Logf("enqueued in %s", time.Since(start).Round(time.Millisecond))
	enqueue("del-good", good, false)
	job := run("tasks", "delete", "--queue", "riverui590", "--where", "payload.bad == true", "--reason", "riverui#590: bad batch")
	check("delete", store.EventTaskDeleted, backstop.OutcomeDeleted, job, "del", ids)
	left, err := c.List(ctx, backstop.ListParams{Queue: "riverui590", Kind: "del", Limit: 10})
	if err != nil || len(left) != 0 {
		t.Fatalf("bad tasks left after delete: %d %v", len(left), err)
	}

	ids = enqueue("can", bad, true)
	enqueue("can-good", good, false)
	job = run("tasks", "cancel", "--kind", "can", "--where", "payload.bad == true", "--reason", "riverui#590: bad batch")
	// Each canceled task's own history is longer to read: every tenth is
	// read; every one's outcome (written in the transaction of its event)
	// and state are checked.
	var sample []string
	for i := 0; i < len(ids); i += 10 {
		sample = append(sample, ids[i])
	}
	check("cancel", store.EventCanceled, "canceled", job, "can", sample)
	canceled, err := c.List(ctx, backstop.ListParams{Kind: "can", States: []bt.State{bt.StateCanceled}, Limit: 10000})
	if err != nil || len(canceled) != bad {
		t.Fatalf("canceled: %d %v", len(canceled), err)
	}
}
