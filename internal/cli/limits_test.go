package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/store"
)

// TestLimitsCLI: limits set, list (table and -o json: name, scope, type,
// value, in_use, waiting) and remove on the database and through a server
// alike; bad input is a usage error that writes nothing; a task a full
// budget holds back says why in tasks show.
func TestLimitsCLI(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		r := newRemoteEnv(t, e, "operator")
		var l backstop.Limit
		e.json(&l, "limits", "set", "heavy1", "--queue", "q", "--kind", "heavy", "--per", "tenant", "--concurrency", "1")
		if l.Name != "heavy1" || l.Queue != "q" || l.Kind != "heavy" || l.Per != "tenant" || l.Concurrency != 1 {
			t.Fatalf("set: %+v", l)
		}
		if res := r.remote("", "limits", "set", "q5", "--queue", "q", "--concurrency", "5"); res.code != 0 ||
			!strings.Contains(res.stdout, "limit q5: at most 5 running at once (queue q)") {
			t.Fatalf("set through the server: %+v", res)
		}
		// Bad input: usage errors naming the problem, nothing written.
		e.fails(ExitUsage, "concurrency", "limits", "set", "bad", "--queue", "q", "--concurrency", "0")
		e.fails(ExitUsage, "--concurrency N or --rate R is required", "limits", "set", "bad", "--queue", "q")
		e.fails(ExitUsage, "queue", "limits", "set", "bad", "--concurrency", "3")
		e.fails(ExitUsage, "per", "limits", "set", "bad", "--queue", "q", "--per", "no spaces", "--concurrency", "3")
		e.fails(ExitUsage, "not both", "limits", "set", "bad", "--queue", "q", "--rate", "10", "--concurrency", "2")
		e.fails(ExitUsage, "--burst is the burst of a --rate limit", "limits", "set", "bad", "--queue", "q", "--burst", "3", "--concurrency", "2")
		e.fails(ExitUsage, "--rate 0: want starts per second above 0", "limits", "set", "bad", "--queue", "q", "--rate", "0")
		e.fails(ExitUsage, "rate", "limits", "set", "bad", "--queue", "q", "--rate", "-3")
		e.fails(ExitUsage, "burst", "limits", "set", "bad", "--queue", "q", "--rate", "3", "--burst", "0")
		e.fails(ExitUsage, "rate", "limits", "set", "bad", "--queue", "q", "--rate", "many")
		if res := r.remote("", "limits", "set", "bad", "--queue", "q", "--concurrency", "-1"); res.code != ExitUsage ||
			!strings.Contains(res.stderr, "concurrency") {
			t.Fatalf("bad concurrency through the server: %+v", res)
		}

		if res := r.remote("", "limits", "set", "mail", "--queue", "m", "--per", "tenant", "--rate", "2.5"); res.code != 0 ||
			!strings.Contains(res.stdout, "limit mail: at most 2.5 starts a second, bursts of 3 (queue m, per tenant)") {
			t.Fatalf("set a rate limit through the server: %+v", res)
		}

		// Two tasks of tenant acme: one running (claimed as a worker
		// would, through the library), one held back by heavy1.
		e.ok("enqueue", "--queue", "q", "--kind", "heavy", "--attr", "tenant=acme", "--id", "a1")
		e.ok("enqueue", "--queue", "q", "--kind", "heavy", "--attr", "tenant=acme", "--id", "a2")
		s, err := dburl.Open(context.Background(), e.db)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		got, err := s.Claim(context.Background(), store.ClaimParams{Queue: "q", WorkerID: "w", Max: 10, Now: time.Now(),
			Lease: time.Minute, Limited: true})
		if err != nil || len(got) != 1 {
			t.Fatalf("claim: %d tasks, %v", len(got), err)
		}
		waiting := "a2"
		if got[0].ID == "a2" {
			waiting = "a1"
		}
		if out := e.ok("tasks", "show", waiting); !strings.Contains(out, "waiting:") ||
			!strings.Contains(out, "concurrency limit heavy1 tenant=acme 1/1") {
			t.Fatalf("tasks show of a held-back task:\n%s", out)
		}

		// A rate limit of one start per 100 s (burst 1): the second task
		// waits on it, and tasks show (here and through the server) says so.
		e.ok("limits", "set", "slow", "--queue", "s", "--per", "tenant", "--rate", "0.01")
		e.ok("enqueue", "--queue", "s", "--kind", "k", "--attr", "tenant=acme", "--id", "s1")
		e.ok("enqueue", "--queue", "s", "--kind", "k", "--attr", "tenant=acme", "--id", "s2")
		got, err = s.Claim(context.Background(), store.ClaimParams{Queue: "s", WorkerID: "w", Max: 10, Now: time.Now(),
			Lease: time.Minute, Limited: true})
		if err != nil || len(got) != 1 {
			t.Fatalf("claim under the rate limit: %d tasks, %v", len(got), err)
		}
		waiting = "s2"
		if got[0].ID == "s2" {
			waiting = "s1"
		}
		for _, out := range []string{e.ok("tasks", "show", waiting), r.remote("", "tasks", "show", waiting).stdout} {
			if !strings.Contains(out, "waiting:") || !strings.Contains(out, "rate limit slow tenant=acme 0.01/s") {
				t.Fatalf("tasks show of a task the rate holds back:\n%s", out)
			}
		}
		e.ok("limits", "remove", "slow")

		out := r.same("limits", "list", "-o", "json")
		var ls []map[string]any
		if err := json.Unmarshal([]byte(out.stdout), &ls); err != nil {
			t.Fatal(err)
		}
		if len(ls) != 3 || ls[1]["name"] != "mail" || ls[1]["type"] != "rate" || ls[1]["value"] != 2.5 || ls[1]["burst"] != 3.0 ||
			ls[1]["tokens"] != 3.0 || ls[1]["waiting"] != 0.0 {
			t.Fatalf("limits list -o json, the rate limit: %s", out.stdout)
		}
		ls = append(ls[:1], ls[2:]...)
		if len(ls) != 2 || ls[0]["name"] != "heavy1" || ls[0]["scope"] != "queue=q kind=heavy per=tenant" ||
			ls[0]["type"] != "concurrency" || ls[0]["value"] != 1.0 || ls[0]["in_use"] != 1.0 || ls[0]["waiting"] != 1.0 ||
			ls[1]["name"] != "q5" || ls[1]["in_use"] != 1.0 || ls[1]["waiting"] != 0.0 {
			t.Fatalf("limits list -o json: %s", out.stdout)
		}
		if tab := r.same("limits", "list").stdout; !strings.Contains(tab, "IN USE") || !strings.Contains(tab, "queue=q kind=heavy per=tenant") ||
			!strings.Contains(tab, "TOKENS") || !strings.Contains(tab, "2.5/s") {
			t.Fatalf("limits list: %s", tab)
		}
		e.ok("limits", "remove", "heavy1")
		e.ok("limits", "remove", "mail")
		e.fails(ExitNotFound, "heavy1", "limits", "remove", "heavy1")
		if res := r.remote("", "limits", "remove", "q5"); res.code != 0 {
			t.Fatalf("remove through the server: %+v", res)
		}
		if res := r.remote("", "limits", "remove", "q5"); res.code != ExitNotFound {
			t.Fatalf("remove twice through the server: %+v", res)
		}
		if out := e.ok("limits", "list", "-o", "json"); strings.TrimSpace(out) != "[]" {
			t.Fatalf("after removing both: %s", out)
		}
	})
}
