package cli

import (
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/audit"
	"github.com/backstophq/backstop/internal/testwait"
)

// TestEnqueueUniqueFor: --unique-for gives --idempotency-key a window;
// within it the first task comes back (a duplicate), and a window that is
// not a positive duration, or has no key, exits 2 with nothing written.
func TestEnqueueUniqueFor(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		for _, c := range []struct {
			value, want string
		}{{"-1s", "--unique-for"}, {"0", "--unique-for"}, {"soon", "unique-for"}} {
			e.fails(ExitUsage, c.want, "enqueue", "--queue", "q", "--kind", "k", "--idempotency-key", "d", "--unique-for", c.value)
		}
		e.fails(ExitUsage, "unique_for", "enqueue", "--queue", "q", "--kind", "k", "--unique-for", "1h")
		if ids := e.listIDs(); len(ids) != 0 {
			t.Fatalf("bad windows wrote %v", ids)
		}
		var first, again taskOut
		e.json(&first, "enqueue", "--queue", "q", "--kind", "k", "--idempotency-key", "d", "--unique-for", "1h")
		if first.UniqueUntil == nil || !first.UniqueUntil.Equal(first.CreatedAt.Add(time.Hour)) {
			t.Fatalf("unique_until %v, want created_at %v + 1h", first.UniqueUntil, first.CreatedAt)
		}
		r := e.run("", "enqueue", "--queue", "q", "--kind", "k", "--idempotency-key", "d", "--unique-for", "1h")
		if r.code != 0 || strings.TrimSpace(r.stdout) != first.ID || !strings.Contains(r.stderr, "duplicate") {
			t.Fatalf("second enqueue: exit %d, id %q (first %q), stderr %q", r.code, r.stdout, first.ID, r.stderr)
		}
		e.json(&again, "tasks", "show", first.ID)
		if again.UniqueUntil == nil || !again.UniqueUntil.Equal(*first.UniqueUntil) {
			t.Errorf("tasks show: unique_until %v, want %v", again.UniqueUntil, first.UniqueUntil)
		}
	})
}

// TestEnqueueDebounce: --debounce replaces the waiting task of its key and
// delays it by --debounce-for; bad durations and lone flags exit 2 with
// nothing written.
func TestEnqueueDebounce(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		base := []string{"enqueue", "--queue", "q", "--kind", "k"}
		for _, c := range []struct {
			want string
			args []string
		}{
			{"--debounce-for", []string{"--debounce", "d", "--debounce-for", "-1s"}},
			{"--debounce-for", []string{"--debounce", "d", "--debounce-for", "0"}},
			{"debounce-for", []string{"--debounce", "d", "--debounce-for", "soon"}},
			{"--debounce-max-wait", []string{"--debounce", "d", "--debounce-for", "1s", "--debounce-max-wait", "0s"}},
			{"debounce.max_wait", []string{"--debounce", "d", "--debounce-for", "1m", "--debounce-max-wait", "1s"}},
			{"--debounce-for", []string{"--debounce", "d"}},
			{"--debounce", []string{"--debounce-for", "1s"}},
			{"debounce.key", []string{"--debounce", "", "--debounce-for", "1s"}},
			{"merge_key", []string{"--debounce", "d", "--debounce-for", "1s", "--merge-key", "other"}},
		} {
			e.fails(ExitUsage, c.want, append(base, c.args...)...)
		}
		if ids := e.listIDs(); len(ids) != 0 {
			t.Fatalf("bad debounces wrote %v", ids)
		}
		var first, second taskOut
		e.json(&first, append(base, "--debounce", "d", "--debounce-for", "1h", "--debounce-max-wait", "2h", "--payload", `{"v":1}`)...)
		if first.State != "scheduled" || first.MergeKey != "d" || !first.RunAt.Equal(first.CreatedAt.Add(time.Hour)) {
			t.Fatalf("first: state %s merge_key %q run_at %v (created %v)", first.State, first.MergeKey, first.RunAt, first.CreatedAt)
		}
		r := e.run("", append(base, "--debounce", "d", "--debounce-for", "1h", "--payload", `{"v":2}`)...)
		if r.code != 0 || strings.TrimSpace(r.stdout) != first.ID || !strings.Contains(r.stderr, "debounced into waiting task") {
			t.Fatalf("second: exit %d, id %q (first %q), stderr %q", r.code, r.stdout, first.ID, r.stderr)
		}
		e.json(&second, "tasks", "show", first.ID)
		if compact(second.Payload) != `{"v":2}` || !second.RunAt.After(first.RunAt) || second.MergeCount != 1 {
			t.Fatalf("debounced task: payload %s run_at %v (first %v) merge_count %d", second.Payload, second.RunAt, first.RunAt, second.MergeCount)
		}
		// tasks show says how it is debounced (the second enqueue had no
		// max wait: none now).
		if out := e.ok("tasks", "show", first.ID); !strings.Contains(out, "key d, runs once quiet for 1h0m0s, no max wait") {
			t.Fatalf("tasks show: no debounce line in\n%s", out)
		}
	})
}

// TestQueuesFair: `queues fair Q --by ATTR --weight V=N` makes the queue
// fair and --off turns it off; bad flags exit 2 with nothing written.
func TestQueuesFair(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		e.fails(ExitUsage, "--by", "queues", "fair", "q")
		e.fails(ExitUsage, "--off", "queues", "fair", "q", "--off", "--by", "tenant")
		e.fails(ExitUsage, "--weight", "queues", "fair", "q", "--by", "tenant", "--weight", "acme")
		e.fails(ExitUsage, "weights", "queues", "fair", "q", "--by", "tenant", "--weight", "acme=0")
		e.fails(ExitUsage, "by", "queues", "fair", "q", "--by", "bad key")
		var out struct {
			Queue   string         `json:"queue"`
			Fair    bool           `json:"fair"`
			By      string         `json:"by"`
			Weights map[string]int `json:"weights"`
			Changed bool           `json:"changed"`
		}
		e.json(&out, "queues", "fair", "q", "--off")
		if out.Changed || out.Fair {
			t.Fatalf("off on a queue that was not fair: %+v", out)
		}
		e.json(&out, "queues", "fair", "q", "--by", "tenant", "--weight", "acme=3")
		if !out.Fair || out.By != "tenant" || out.Weights["acme"] != 3 {
			t.Fatalf("fair: %+v", out)
		}
		if got := e.ok("queues", "fair", "q", "--off", "--actor", "ops", "--reason", "backlog gone"); !strings.Contains(got, "no longer fair") {
			t.Fatalf("off: %q", got)
		}
		e.fails(ExitUsage, "--reason", "queues", "fair", "q", "--by", "tenant", "--reason", strings.Repeat("x", 1025))
		// Both changes are in the audit stream; the refused ones are not.
		var p audit.Page
		testwait.For(t, "the two fairness changes audited", func() bool {
			p = audit.Page{}
			e.json(&p, "audit", "list", "--type", "queue.fair_set,queue.fair_removed")
			return len(p.Items) >= 2
		})
		if len(p.Items) != 2 || p.Items[0].Type != "queue.fair_set" || !strings.HasPrefix(p.Items[0].Actor, "cli") ||
			p.Items[0].Target != "q" || p.Items[1].Type != "queue.fair_removed" || p.Items[1].Actor != "ops" || p.Items[1].Reason != "backlog gone" {
			t.Fatalf("audit: %+v", p.Items)
		}
	})
}

// TestQueuesFairList: `queues fair --list` lists the fair queues with their
// pending tasks by value (table and -o json), on the database and through a
// server alike; --list with a queue or a change exits 2.
func TestQueuesFairList(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		r := newRemoteEnv(t, e, "viewer")
		if out := r.same("queues", "fair", "--list", "-o", "json"); strings.TrimSpace(out.stdout) != "[]" {
			t.Fatalf("no fair queue: exit %d %s %s", out.code, out.stdout, out.stderr)
		}
		e.fails(ExitUsage, "--list", "queues", "fair", "q", "--list")
		e.fails(ExitUsage, "--list", "queues", "fair", "--list", "--by", "tenant")
		e.fails(ExitUsage, "--list", "queues", "fair", "--list", "--off")
		e.fails(ExitUsage, "QUEUE", "queues", "fair", "--by", "tenant")
		e.ok("queues", "fair", "q", "--by", "tenant", "--weight", "acme=3")
		e.ok("queues", "fair", "idle", "--by", "region")
		for _, attr := range []string{"tenant=acme", "tenant=acme", "tenant=beta", ""} {
			args := []string{"enqueue", "--queue", "q", "--kind", "k"}
			if attr != "" {
				args = append(args, "--attr", attr)
			}
			e.ok(args...)
		}
		var fs []struct {
			Queue   string         `json:"queue"`
			By      string         `json:"by"`
			Weights map[string]int `json:"weights"`
			Values  []struct {
				Value   string `json:"value"`
				Weight  int    `json:"weight"`
				Pending int    `json:"pending"`
			} `json:"values"`
		}
		if err := json.Unmarshal([]byte(r.same("queues", "fair", "--list", "-o", "json").stdout), &fs); err != nil {
			t.Fatal(err)
		}
		if len(fs) != 2 || fs[0].Queue != "idle" || len(fs[0].Values) != 0 || fs[1].Queue != "q" || fs[1].By != "tenant" ||
			fs[1].Weights["acme"] != 3 || len(fs[1].Values) != 3 ||
			fs[1].Values[0].Value != "acme" || fs[1].Values[0].Weight != 3 || fs[1].Values[0].Pending != 2 ||
			fs[1].Values[1].Value != "" || fs[1].Values[1].Pending != 1 || fs[1].Values[2].Value != "beta" || fs[1].Values[2].Weight != 1 {
			t.Fatalf("queues fair --list -o json: %+v", fs)
		}
		tab := r.same("queues", "fair", "--list").stdout
		for _, want := range []string{"QUEUE", "PENDING", "idle", "(none)"} {
			if !strings.Contains(tab, want) {
				t.Fatalf("queues fair --list: no %q in\n%s", want, tab)
			}
		}
		if !regexp.MustCompile(`q\s+tenant\s+acme\s+3\s+2`).MatchString(tab) {
			t.Fatalf("queues fair --list: no line for acme in\n%s", tab)
		}
	})
}

// TestWorkAppliesConfigFairness: a queue's fair section in --config is set
// in the database when `work` starts.
func TestWorkAppliesConfigFairness(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		cfg := t.TempDir() + "/fair.yaml"
		if err := os.WriteFile(cfg, []byte("queues:\n  fq:\n    fair: {by: tenant, weights: {acme: 2}}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for range 2 { // the second start finds it set alike
			if r := e.run("", "work", "--config", cfg, "--queue", "fq", "--exit-after-idle", "100ms", "--", "true"); r.code != 0 {
				t.Fatalf("work: exit %d, stderr %s", r.code, r.stderr)
			}
		}
		if got := e.ok("queues", "fair", "fq", "--off"); !strings.Contains(got, "no longer fair") {
			t.Fatalf("after work: %q, want the queue fair", got)
		}
	})
}

// FuzzParseWeights: --weight VALUE=N is refused with exit 2 or read back
// as given.
func FuzzParseWeights(f *testing.F) {
	for _, s := range []string{"acme=3", "=1", "a=b", "a=1=2", "a", "", "x=-1", "x=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w, err := parseWeights([]string{s})
		if err != nil {
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != ExitUsage {
				t.Fatalf("%q: %v, want a usage error", s, err)
			}
			return
		}
		v, n, _ := strings.Cut(s, "=")
		if len(w) != 1 || w[v] != mustAtoi(n) {
			t.Fatalf("%q: read %v", s, w)
		}
	})
}

func mustAtoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
