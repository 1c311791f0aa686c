package api

import (
	"encoding/json"
	"net/http"

	"github.com/backstophq/backstop"
)

// MessageRequest is POST /v1/messages: one outbox message (docs/brokers.md).
type MessageRequest struct {
	Sink       string            `json:"sink"`
	Topic      string            `json:"topic"`
	Key        string            `json:"key,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	Payload    json.RawMessage   `json:"payload"`
	Attributes map[string]string `json:"attributes,omitempty"`
}

// Message is the request as the library's message.
func (m MessageRequest) Message() backstop.Message {
	return backstop.Message{Sink: m.Sink, Topic: m.Topic, Key: m.Key, Headers: m.Headers, Payload: m.Payload, Attributes: m.Attributes}
}

// MessageResponse: the message's id (its task's, the broker's
// de-duplication id), its sink and its task.
type MessageResponse struct {
	ID   string   `json:"id"`
	Sink string   `json:"sink"`
	Task TaskView `json:"task"`
}

// POST /v1/messages writes one message for the relay to deliver; 201.
func (s *Server) postMessage(w http.ResponseWriter, r *http.Request) error {
	var req MessageRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	rs, err := s.c.Publish(actorContext(r), req.Message())
	if err != nil {
		return err
	}
	t := rs[0].Task
	p := principalFrom(r.Context())
	s.log.Info("message published", append([]any{"actor", p.Name, "task_id", t.ID, "sink", req.Sink, "topic", req.Topic},
		traceParentArgs(t.TraceParent)...)...)
	return writeJSON(w, http.StatusCreated, MessageResponse{ID: t.ID, Sink: req.Sink, Task: view(p, t, false)})
}
