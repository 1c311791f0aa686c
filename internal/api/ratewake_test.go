package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
)

// A remote worker's waiting claim that a rate limit held back claims
// again when the limit's next token is due (50 ms at 20/s), not when its
// poll (5 s on the test server) or its wait (10 s) runs out.
func TestClaimWaitsForTheNextToken(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(t *testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		if _, err := b.lib.SetLimit(ctx, backstop.Limit{Name: "slow", Queue: "rq", Rate: 20, Burst: 1}, "test"); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := b.lib.Enqueue(ctx, backstop.EnqueueParams{Queue: "rq", Kind: "k"}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 2 {
			start := time.Now()
			st, raw := b.raw(t, api.RoleOperator, "POST", "/v1/claim", "application/json",
				`{"queues":["rq"],"worker_id":"w","max":1,"wait":"10s"}`)
			var r api.ClaimResponse
			if st != http.StatusOK || json.Unmarshal(raw, &r) != nil {
				t.Fatalf("claim %d: %d %s", i, st, raw)
			}
			if len(r.Tasks) != 1 {
				t.Fatalf("claim %d: %d tasks, want the next token's", i, len(r.Tasks))
			}
			if took := time.Since(start); took >= 2500*time.Millisecond {
				t.Fatalf("claim %d took %s: it waited for its poll or its wait, not for the token", i, took)
			}
		}
	})
}
