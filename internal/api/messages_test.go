package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
)

// POST /v1/messages writes a message task on its sink's queue (201, the
// id is the task's); bad input is 400 naming the field, and nothing is
// written.
func TestPostMessage(t *testing.T) {
	stores(t, func(t *testing.T, dbURL func(t *testing.T) string) {
		b := setup(t, dbURL(t), setupOpts{})
		ctx := context.Background()
		op := b.as[api.RoleOperator]
		res, err := op.Publish(ctx, api.MessageRequest{Sink: "bus", Topic: "orders.created", Key: "o-1",
			Headers: map[string]string{"X-Tenant": "acme"}, Payload: json.RawMessage(`{"id":1}`), Attributes: map[string]string{"corr": "c-1"}})
		if err != nil {
			t.Fatal(err)
		}
		task, err := b.lib.Get(ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		var m backstop.Message
		if err := json.Unmarshal(task.Payload, &m); err != nil {
			t.Fatal(err)
		}
		if res.Sink != "bus" || task.Queue != "sink.bus" || task.Kind != backstop.MessageKind || task.OrderingKey != "o-1" ||
			m.Topic != "orders.created" || m.Headers["X-Tenant"] != "acme" || string(m.Payload) != `{"id":1}` || task.Attributes["corr"] != "c-1" {
			t.Fatalf("message task %+v, payload %+v", task, m)
		}
		for _, tc := range []struct {
			req   api.MessageRequest
			field string
		}{
			{api.MessageRequest{Topic: "t", Payload: json.RawMessage(`{}`)}, "sink"},
			{api.MessageRequest{Sink: "bus", Payload: json.RawMessage(`{}`)}, "topic"},
			{api.MessageRequest{Sink: "bus", Topic: "a b", Payload: json.RawMessage(`{}`)}, "topic"},
			{api.MessageRequest{Sink: "bus", Topic: "t"}, "payload"},
			{api.MessageRequest{Sink: "bus", Topic: "t", Headers: map[string]string{"bad name": "x"}, Payload: json.RawMessage(`{}`)}, "headers"},
		} {
			_, err := op.Publish(ctx, tc.req)
			var p *api.Problem
			if !errors.As(err, &p) || p.Status != http.StatusBadRequest || p.Field != tc.field {
				t.Errorf("%+v: got %v, want 400 naming %s", tc.req, err, tc.field)
			}
		}
		if code, _ := b.raw(t, api.RoleOperator, "POST", "/v1/messages", "application/json", `{"sink":"bus","topic":"t","payload":{},"extra":1}`); code != http.StatusBadRequest {
			t.Errorf("unknown key: %d", code)
		}
		if code, _ := b.raw(t, api.RoleViewer, "POST", "/v1/messages", "application/json", `{"sink":"bus","topic":"t","payload":{}}`); code != http.StatusForbidden {
			t.Errorf("viewer: %d, want 403", code)
		}
		ts, err := b.lib.List(ctx, backstop.ListParams{Queue: "sink.bus"})
		if err != nil || len(ts) != 1 {
			t.Fatalf("sink.bus holds %d tasks (%v), want 1", len(ts), err)
		}
	})
}
