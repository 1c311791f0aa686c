package cli

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/dburl"
)

// TestLeasesRotateKey: `leases rotate-key` replaces the lease token key and
// keeps the old one until the grace is up; a bad --grace exits 2 and
// changes nothing.
func TestLeasesRotateKey(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		e.ok("enqueue", "--queue", "q", "--kind", "k") // migrates the database
		versions := func() (cur, prev []byte, until time.Time) {
			t.Helper()
			s, err := dburl.Open(context.Background(), e.db)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			cur, prev, until, err = s.SecretVersions(context.Background(), "lease_token_key")
			if err != nil {
				t.Fatal(err)
			}
			return cur, prev, until
		}
		for _, bad := range []string{"-1s", "169h", "soon"} {
			e.fails(ExitUsage, "--grace", "leases", "rotate-key", "--grace", bad)
		}
		if cur, prev, _ := versions(); cur != nil || prev != nil {
			t.Fatalf("a refused rotation wrote a key: %x %x", cur, prev)
		}
		before := time.Now()
		var out rotatedJSON
		e.json(&out, "leases", "rotate-key", "--grace", "30m")
		first, _, _ := versions()
		if !out.Rotated || out.Grace != "30m0s" || len(first) != 32 {
			t.Fatalf("first rotation: %+v, key %d bytes", out, len(first))
		}
		e.json(&out, "leases", "rotate-key", "--grace", "2h")
		cur, prev, until := versions()
		if !bytes.Equal(prev, first) || bytes.Equal(cur, first) || len(cur) != 32 {
			t.Fatal("the second rotation did not keep the first key as the previous one")
		}
		if !until.Equal(out.PreviousGoodUntil) || until.Before(before.Add(2*time.Hour)) || until.After(time.Now().Add(2*time.Hour)) {
			t.Fatalf("previous good until %s (printed %s), want two hours from now", until, out.PreviousGoodUntil)
		}
		if got := e.ok("leases", "rotate-key"); !bytes.Contains([]byte(got), []byte("grace 1h0m0s")) {
			t.Fatalf("text output: %q", got)
		}
	})
}
