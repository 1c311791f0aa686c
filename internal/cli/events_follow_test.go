package cli

import (
	"context"
	"errors"
	"testing"

	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// A follower through --server retries what the server answers with 5xx or
// 429, and stops on a 4xx (a revoked token must not be retried forever).
func TestFollowRetryableThroughServer(t *testing.T) {
	ctx := context.Background()
	wrap := func(p *api.Problem) error {
		retry, _ := apiclient.Retryable(p)
		return serverReadError{remoteErr(p), retry}
	}
	for _, c := range []struct {
		status int
		want   bool
	}{{401, false}, {403, false}, {400, false}, {503, true}, {429, true}} {
		if got := followRetryable(ctx, wrap(&api.Problem{Status: c.status, Code: "x", Detail: "d"})); got != c.want {
			t.Errorf("status %d: retry %v, want %v", c.status, got, c.want)
		}
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if followRetryable(canceled, wrap(&api.Problem{Status: 503})) {
		t.Error("a canceled follower retried")
	}
	// A database error keeps the library's rule (a dropped connection is retried).
	if !followRetryable(ctx, errors.New("unexpected EOF")) {
		t.Error("a database read error was not retried")
	}
}
