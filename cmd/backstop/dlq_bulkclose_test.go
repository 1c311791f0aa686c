package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// twoCauses makes n dead letters in queue q: two in three of cause a
// (payload kind "a", error "cause a: upstream timeout"), the others of
// cause b, interleaved by id.
func twoCauses(t *testing.T, url, q string, n int) *backstop.Client {
	t.Helper()
	ctx := context.Background()
	s, c := storeClient(t, url)
	params := make([]backstop.EnqueueParams, n)
	for i := range params {
		kind := "a"
		if i%3 == 2 {
			kind = "b"
		}
		params[i] = backstop.EnqueueParams{ID: fmt.Sprintf("%s-%05d", q, i), Queue: q, Kind: "job",
			Payload: []byte(fmt.Sprintf(`{"kind":%q,"n":%d}`, kind, i))}
	}
	if _, err := c.EnqueueMany(ctx, params); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	got, err := s.Claim(ctx, store.ClaimParams{Queue: q, WorkerID: "test", Max: n, Now: now, Lease: time.Minute})
	if err != nil || len(got) != n {
		t.Fatalf("claim: %d %v", len(got), err)
	}
	ss := make([]store.Settlement, len(got))
	for i, task := range got {
		cause := "cause a: upstream timeout"
		if strings.Contains(string(task.Payload), `"b"`) {
			cause = "cause b: bad data"
		}
		ss[i] = store.Settlement{TaskID: task.ID, ExecutionID: task.ExecutionID, Outcome: bt.OutcomePermanentError,
			Error: cause, FinishedAt: now, State: bt.StateDead, DeadReason: bt.ReasonPermanentError}
	}
	if _, err := s.Settle(ctx, ss); err != nil {
		t.Fatal(err)
	}
	return c
}

// dlqByStatus counts queue q's dead letters by status and payload kind:
// "open/a" → n.
func dlqByStatus(t *testing.T, c *backstop.Client, q string) map[string]int {
	t.Helper()
	out := map[string]int{}
	f := backstop.ListParams{Queue: q, Limit: 1000}
	for {
		ts, err := c.DeadLetters(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ts {
			var p struct{ Kind string }
			if err := json.Unmarshal(d.Payload, &p); err != nil {
				t.Fatal(err)
			}
			out[string(d.DLQStatus)+"/"+p.Kind]++
		}
		if len(ts) < f.Limit {
			return out
		}
		f.AfterID = ts[len(ts)-1].ID
	}
}

func eventCount(t *testing.T, c *backstop.Client, ids ...string) int {
	t.Helper()
	n := 0
	for _, id := range ids {
		evs, err := c.Events(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		n += len(evs)
	}
	return n
}

// TestDLQDiscardResolveByFilter: `dlq discard` and `dlq resolve` without an
// ID close every open dead letter a selection matches, on both stores: of
// 300 dead letters from two causes, a --where on the payload discards
// exactly cause a's 200 (each with its own history event: actor and
// reason), after a dry run (count and sample, nothing changed) and the
// confirmation rules (--yes needed from a pipe, the terminal's question);
// --error-contains resolves cause b's. Each bad input exits 2 naming the
// problem and changes nothing. Then `dlq purge --where` deletes only cause
// a's records, and only with --below-floor since 0s is below the purge
// floor.
func TestDLQDiscardResolveByFilter(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			url := st.url(t)
			c := twoCauses(t, url, "bulk", 300)
			sampleIDs := []string{"bulk-00000", "bulk-00002", "bulk-00299"}
			events := eventCount(t, c, sampleIDs...)
			unchanged := func(what string) {
				t.Helper()
				if got := dlqByStatus(t, c, "bulk"); got["open/a"] != 200 || got["open/b"] != 100 || len(got) != 2 {
					t.Fatalf("%s changed the dead letters: %v", what, got)
				}
				if n := eventCount(t, c, sampleIDs...); n != events {
					t.Fatalf("%s wrote history: %d events, was %d", what, n, events)
				}
			}
			run := func(args ...string) (string, string, int) {
				t.Helper()
				return runStdin(t, strings.NewReader(""), append([]string{"--db", url, "dlq"}, args...)...)
			}
			const whereA = `payload.kind == "a"`

			for _, bad := range []struct {
				want string
				args []string
			}{
				{"--all", []string{"discard", "--reason", "x"}},
				{"--all", []string{"resolve", "--note", "x"}},
				{"not both", []string{"discard", "bulk-00000", "--queue", "bulk", "--reason", "x"}},
				{"not both", []string{"resolve", "bulk-00000", "--where", whereA}},
				{"not both", []string{"discard", "bulk-00000", "--reason", "x", "--yes"}},
				{"drop --all", []string{"discard", "--all", "--queue", "bulk", "--reason", "x"}},
				{"--where", []string{"discard", "--where", `payload.kind ==`, "--reason", "x", "--yes"}},
				{"--reason is required", []string{"discard", "--where", whereA, "--yes"}},
				{"--dead-reason", []string{"discard", "--dead-reason", "bogus", "--reason", "x", "--yes"}},
				{"--confirm-over", []string{"discard", "--queue", "bulk", "--confirm-over", "-1", "--reason", "x"}},
				{"--sample", []string{"discard", "--queue", "bulk", "--dry-run", "--sample", "101", "--reason", "x"}},
				{"--attr", []string{"resolve", "--attr", "nokey", "--note", "x", "--yes"}},
				{"--since", []string{"resolve", "--queue", "bulk", "--since", "yesterday", "--yes"}},
				{"--yes", []string{"discard", "--where", whereA, "--reason", "x"}}, // 200 > 100, no terminal
				{"--yes", []string{"resolve", "--queue", "bulk", "--note", "x"}},   // 300 > 100
			} {
				out, errs, code := run(bad.args...)
				if code != 2 || !strings.Contains(errs, bad.want) {
					t.Fatalf("dlq %v: exit %d, stderr %q (want 2 naming %s); stdout %q", bad.args, code, errs, bad.want, out)
				}
			}
			unchanged("the refused commands")

			out, errs, code := run("discard", "--where", whereA, "--reason", "x", "--dry-run", "--sample", "3")
			if code != 0 || !strings.Contains(out, "would discard 200 dead letters (dry run: nothing changed)") ||
				!strings.Contains(out, "bulk-00000") || !strings.Contains(out, "bulk-00003") || strings.Contains(out, "bulk-00002") ||
				!strings.Contains(out, "cause a: upstream timeout") {
				t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errs)
			}
			out, errs, code = run("resolve", "--all", "--dry-run", "-o", "json")
			var pv struct {
				DryRun  bool `json:"dry_run"`
				Matched int
				Sample  []struct{ ID string }
			}
			if err := json.Unmarshal([]byte(out), &pv); code != 0 || err != nil || !pv.DryRun || pv.Matched != 300 ||
				len(pv.Sample) != backstop.DefaultRedriveSample {
				t.Fatalf("dry run --all json: exit %d %v\n%s\n%s", code, err, out, errs)
			}
			unchanged("the dry runs")

			m, s := openPTY(t)
			typeAnswer(t, m, "n")
			out, errs, code = runStdin(t, s, "--db", url, "dlq", "discard", "--where", whereA, "--reason", "x")
			if code != 1 || !strings.Contains(errs, "Discard 200 dead letters? [y/N]") || !strings.Contains(errs, "nothing discarded") {
				t.Fatalf("answered no: exit %d %q %q", code, out, errs)
			}
			unchanged("the answer no")

			out, errs, code = run("discard", "--where", whereA, "--reason", "cause a is fixed upstream", "--actor", "ops@test",
				"--yes", "-o", "json")
			if code != 0 || compactJSON(out) != `{"status":"discarded","matched":200,"closed":200,"skipped":0,"done":true}` {
				t.Fatalf("discard where: exit %d\n%s\n%s", code, out, errs)
			}
			if got := dlqByStatus(t, c, "bulk"); got["discarded/a"] != 200 || got["open/b"] != 100 || len(got) != 2 {
				t.Fatalf("after the discard: %v", got)
			}
			evs, err := c.Events(context.Background(), "bulk-00003")
			if err != nil {
				t.Fatal(err)
			}
			if e := evs[len(evs)-1]; e.Type != "dlq.discarded" || e.Actor != "ops@test" || !strings.Contains(string(e.Body), "cause a is fixed upstream") {
				t.Fatalf("bulk-00003's history: %+v", e)
			}

			// 100 left: at --confirm-over, no question; text progress.
			out, errs, code = run("resolve", "--error-contains", "cause b", "--note", "replayed by hand", "--actor", "ops@test")
			if code != 0 || out != "resolved 100 dead letters\n" || !strings.Contains(errs, "resolved 100 of 100") {
				t.Fatalf("resolve error-contains: exit %d %q %q", code, out, errs)
			}
			if got := dlqByStatus(t, c, "bulk"); got["discarded/a"] != 200 || got["resolved/b"] != 100 || len(got) != 2 {
				t.Fatalf("after the resolve: %v", got)
			}
			if out, _, code = run("discard", "--all", "--reason", "x"); code != 0 || out != "discarded 0 dead letters\n" {
				t.Fatalf("nothing left open: exit %d %q", code, out)
			}

			// Purge by where, below the floor only when said.
			purge := func(args ...string) (string, string, int) {
				return run(append([]string{"purge", "--older-than", "0s"}, args...)...)
			}
			closed := map[string]int{"discarded/a": 200, "resolved/b": 100}
			for _, bad := range []struct {
				want string
				args []string
			}{
				{"purge_floor", []string{"--where", whereA}},
				{"--where", []string{"--where", `payload.kind ==`, "--below-floor"}},
			} {
				out, errs, code := purge(bad.args...)
				if code != 2 || !strings.Contains(errs, bad.want) {
					t.Fatalf("purge %v: exit %d %q %q", bad.args, code, out, errs)
				}
				if bad.want == "purge_floor" && (!strings.Contains(errs, "0s") || !strings.Contains(errs, "168h")) {
					t.Fatalf("purge below the floor names neither age: %q", errs)
				}
				if got := dlqByStatus(t, c, "bulk"); fmt.Sprint(got) != fmt.Sprint(closed) {
					t.Fatalf("refused purge %v deleted: %v", bad.args, got)
				}
			}
			if out, errs, code := purge("--where", whereA, "--below-floor", "--dry-run"); code != 0 || !strings.Contains(out, "would purge 200 ") {
				t.Fatalf("purge dry run: exit %d %q %q", code, out, errs)
			}
			if out, errs, code := purge("--where", whereA, "--below-floor", "--reason", "cleanup"); code != 0 || out != "purged 200 dead letters\n" {
				t.Fatalf("purge where: exit %d %q %q", code, out, errs)
			}
			if got := dlqByStatus(t, c, "bulk"); fmt.Sprint(got) != fmt.Sprint(map[string]int{"resolved/b": 100}) {
				t.Fatalf("after the purge: %v", got)
			}
		})
	}
}

// TestDLQDiscardByFilterOverServer: the same through --server (POST
// /v1/dlq/close, a batch per call, looped by the CLI): the dry run, --yes
// needed without a terminal, the discard of exactly the --where's dead
// letters recorded with the server's actor and the reason; and the purge
// floor and where of POST /v1/dlq/purge.
func TestDLQDiscardByFilterOverServer(t *testing.T) {
	t.Parallel()
	db := st0(t)
	c := twoCauses(t, db, "sbulk", 1200)
	base := startServer(t, db)
	run := func(args ...string) (string, string, int) {
		t.Helper()
		return runStdin(t, strings.NewReader(""), append([]string{"--server", base, "dlq"}, args...)...)
	}
	const whereA = `payload.kind == "a"`
	if out, errs, code := run("discard", "--where", whereA, "--reason", "x", "--dry-run"); code != 0 || !strings.Contains(out, "would discard 800 ") {
		t.Fatalf("dry run: exit %d %q %q", code, out, errs)
	}
	if out, errs, code := run("discard", "--where", whereA, "--reason", "x"); code != 2 || !strings.Contains(errs, "--yes") {
		t.Fatalf("no --yes: exit %d %q %q", code, out, errs)
	}
	if out, errs, code := run("discard", "--where", `payload.kind ==`, "--reason", "x", "--yes"); code != 2 || !strings.Contains(errs, "where") {
		t.Fatalf("bad where: exit %d %q %q", code, out, errs)
	}
	if got := dlqByStatus(t, c, "sbulk"); got["open/a"] != 800 || got["open/b"] != 400 {
		t.Fatalf("refused commands changed: %v", got)
	}
	out, errs, code := run("discard", "--where", whereA, "--reason", "cause a fixed", "--yes")
	if code != 0 || out != "discarded 800 dead letters\n" || !strings.Contains(errs, "discarded 500 of 800") {
		t.Fatalf("discard over the server: exit %d %q %q", code, out, errs)
	}
	if got := dlqByStatus(t, c, "sbulk"); got["discarded/a"] != 800 || got["open/b"] != 400 || len(got) != 2 {
		t.Fatalf("after the discard: %v", got)
	}
	evs, err := c.Events(context.Background(), "sbulk-00000")
	if err != nil {
		t.Fatal(err)
	}
	if e := evs[len(evs)-1]; e.Type != "dlq.discarded" || e.Actor == "" || !strings.Contains(string(e.Body), "cause a fixed") {
		t.Fatalf("history: %+v", e)
	}
	if out, errs, code := run("purge", "--older-than", "1h", "--where", whereA); code != 2 || !strings.Contains(errs, "purge_floor") {
		t.Fatalf("purge below the floor: exit %d %q %q", code, out, errs)
	}
	if out, errs, code := run("purge", "--older-than", "0s", "--where", whereA, "--below-floor"); code != 0 || out != "purged 800 dead letters\n" {
		t.Fatalf("purge where: exit %d %q %q", code, out, errs)
	}
	if got := dlqByStatus(t, c, "sbulk"); got["open/b"] != 400 || len(got) != 1 {
		t.Fatalf("after the purge: %v", got)
	}
}

func st0(t *testing.T) string { return stores[0].url(t) }
