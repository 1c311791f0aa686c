package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
)

// A redrive of an unknown run is 404 and writes no redrive record; one
// that matches nothing answers status empty (its record too), never done.
func TestRedriveOfNothingTellsTheTruth(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, dbURL func(*testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{rateLimit: -1})
		ctx := context.Background()
		admin := b.as[api.RoleAdmin]
		_, err := admin.Redrive(ctx, api.RedriveRequest{RunID: "NO-SUCH-RUN"})
		mustCode(t, err, "not_found")
		if l, err := admin.Redrives(ctx, nil); err != nil || len(l.Items) != 0 {
			t.Fatalf("an unknown run's redrive left records: %+v %v", l, err)
		}
		kill(t, b, apiclient.Task{Queue: "other", Kind: "k", Payload: json.RawMessage(`{}`)})
		st, err := admin.Redrive(ctx, api.RedriveRequest{Queue: "nothing-here", Wait: 5e9})
		if err != nil || st.Status != "empty" || !st.Empty || st.Replayed != 0 {
			t.Fatalf("a redrive matching nothing: %+v %v", st, err)
		}
		rec, err := b.as[api.RoleViewer].RedriveStatus(ctx, st.RedriveID)
		if err != nil || rec.Status != "empty" || rec.Resumable {
			t.Fatalf("its record: %+v %v", rec, err)
		}
	})
}

// A time in a request body that is not one is refused 400 naming the
// field (encoding/json's error names neither field nor value).
func TestBodyTimeNamesTheField(t *testing.T) {
	t.Parallel()
	b := setup(t, testdbSQLite(t), setupOpts{rateLimit: -1})
	for _, c := range []struct{ path, body, field string }{
		{"/v1/dlq/redrive", `{"queue":"q","since":"yesterday"}`, "since"},
		{"/v1/dlq/redrive", `{"queue":"q","until":12}`, "until"},
		{"/v1/dlq/close", `{"status":"resolved","note":"n","snapshot":"not a time"}`, "snapshot"},
	} {
		code, body := b.raw(t, api.RoleAdmin, "POST", c.path, "application/json", c.body)
		var p api.Problem
		if err := json.Unmarshal(body, &p); err != nil || code != http.StatusBadRequest || p.Field != c.field ||
			!strings.HasPrefix(p.Detail, c.field+": want an RFC 3339 time") {
			t.Fatalf("%s %s: %d %s", c.path, c.body, code, body)
		}
	}
}
