package backstop

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/uuid"
)

// A message's sequence follows its id's order: the publish order of one
// process.
func TestMessageSequenceOrder(t *testing.T) {
	prev := int64(-1)
	for range 10000 {
		id := uuid.Must(uuid.NewV7())
		s := MessageSequence(id)
		if s <= prev {
			t.Fatalf("sequence %d after %d (id %s)", s, prev, id)
		}
		prev = s
	}
}

// Whatever a caller hands PublishTx is either a message task (its queue a
// valid name, its payload the message's JSON) or a ValidationError naming
// the field; never a panic.
func FuzzPublishMessage(f *testing.F) {
	f.Add("bus", "orders.created", "k", "X-Tenant", "acme", []byte(`{"id":1}`))
	f.Add("", "t", "", "", "", []byte(`{}`))
	f.Add("bus", "a b", "", "", "", []byte(`{}`))
	f.Add("bus", "t", "", "bad name", "v", []byte(`{}`))
	f.Add("bus", "t", "", "h", "line\nbreak", []byte(`{}`))
	f.Add("b us", "t", "", "", "", []byte(`null`))
	f.Add("bus", "t", "", "", "", []byte(`{"a":`))
	f.Fuzz(func(t *testing.T, sink, topic, key, hk, hv string, payload []byte) {
		m := Message{Sink: sink, Topic: topic, Key: key, Payload: payload}
		if hk != "" {
			m.Headers = map[string]string{hk: hv}
		}
		ps, err := messageParams([]Message{m})
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("%+v: error %v is not a validation error", m, err)
			}
			return
		}
		p := ps[0]
		var back Message
		if err := json.Unmarshal(p.Payload, &back); err != nil || back.Topic != topic || back.Key != key {
			t.Fatalf("%+v: payload %s (%v)", m, p.Payload, err)
		}
		if p.Queue != SinkQueue(sink) || p.Kind != MessageKind || (key != "") != (p.OrderingKey != "") {
			t.Fatalf("%+v: params %+v", m, p)
		}
	})
}
