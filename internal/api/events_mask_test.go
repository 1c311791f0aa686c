package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/testwait"
)

// The event log served by GET /v1/events (JSON and Server-Sent Events)
// masks the payload fragments in event bodies as a task's history does: a
// replay's merge patch naming a redacted key reads [REDACTED].
func TestEventLogMasked(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		id := kill(t, b, apiclient.Task{Queue: "pay", Kind: "charge", Payload: json.RawMessage(`{"amount":500}`)})
		if st, body := b.raw(t, api.RoleAdmin, "POST", "/v1/dlq/"+id+"/replay", "application/json",
			`{"merge_patch":{"password":"hunter2"}}`); st != http.StatusOK {
			t.Fatalf("replay: %d %s", st, body)
		}
		// An event is served once every earlier sequence number has
		// committed or rolled back (gap-free cursors): wait for it.
		var body []byte
		testwait.For(t, "the replay's event in the log", func() bool {
			var st int
			st, body = b.raw(t, api.RoleViewer, "GET", "/v1/events?stream=type.dlq.replay_requested", "", "")
			if st != http.StatusOK {
				t.Fatalf("events: %d %s", st, body)
			}
			return strings.Contains(string(body), "merge_patch")
		})
		if strings.Contains(string(body), "hunter2") || !strings.Contains(string(body), "[REDACTED]") {
			t.Fatalf("the event log serves a redacted key: %s", body)
		}
		// The stream of the same events.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", b.ts.URL+"/v1/events/stream?stream=type.dlq.replay_requested", nil)
		req.Header.Set("Authorization", "Bearer "+b.secret[api.RoleViewer])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got []byte
		buf := make([]byte, 4096)
		for !strings.Contains(string(got), "merge_patch") {
			n, err := resp.Body.Read(buf)
			got = append(got, buf[:n]...)
			if err == io.EOF || err != nil {
				break
			}
		}
		if !strings.Contains(string(got), "[REDACTED]") || strings.Contains(string(got), "hunter2") {
			t.Fatalf("the event stream serves a redacted key: %s", got)
		}
	})
}
