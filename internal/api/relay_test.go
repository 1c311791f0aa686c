package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/store"
)

// GET /v1/relay (viewer): each sink's messages and each checkpoint, in
// the document's shape; a parameter is 400.
func TestRelayStatusEndpoint(t *testing.T) {
	t.Parallel()
	b := setup(t, testdbSQLite(t), setupOpts{})
	ctx := context.Background()
	if _, err := b.lib.Publish(ctx, backstop.Message{Sink: "bus", Topic: "t", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := b.store.SaveRelayCheckpoint(ctx, store.RelayCheckpointUpdate{Name: "feed", Stream: "all", Sink: "bus", Error: "boom", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	from := time.Now().Add(-time.Minute)
	if err := b.store.SaveIngestPosition(ctx, store.IngestPosition{Group: "g", Topic: "uptime", Queue: "results", Holder: "h",
		LagMessages: 4, LagFrom: &from, UpdatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	st, err := b.as[api.RoleViewer].RelayStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Sinks) != 1 || st.Sinks[0].Sink != "bus" || st.Sinks[0].Pending != 1 || len(st.Checkpoints) != 1 ||
		st.Checkpoints[0].Name != "feed" || st.Checkpoints[0].LastError != "boom" || st.Checkpoints[0].LastErrorAt == nil {
		t.Fatalf("relay status %+v", st)
	}
	if len(st.Ingesters) != 1 || st.Ingesters[0].Topic != "uptime" || st.Ingesters[0].LagMessages != 4 || st.Ingesters[0].LagSeconds < 59 {
		t.Fatalf("ingesters %+v", st.Ingesters)
	}
	if code, body := b.raw(t, api.RoleViewer, "GET", "/v1/relay?x=1", "", ""); code != http.StatusBadRequest {
		t.Fatalf("a parameter: %d %s", code, body)
	}
	if code, _ := b.raw(t, api.RoleNone, "GET", "/v1/relay", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", code)
	}
}
