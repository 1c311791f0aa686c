package storetest

import (
	"encoding/json"
	"testing"

	"github.com/backstophq/backstop"
)

// testDLQReopen: a dead letter discarded or resolved by mistake can be
// replayed with Reopen (and only with it): in place or as a copy, the
// history records the actor and the status it came from. A replayed record
// (its copy lives) is never replayed again, and redrive stays open-only.
func (s *suite) testDLQReopen(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	for _, id := range []string{"disc", "res", "res-copy", "twice"} {
		b.dead(backstop.EnqueueParams{ID: id, Queue: "q-" + id, Kind: "k", Payload: json.RawMessage(`{}`)})
	}
	if _, err := b.c.Discard(b.ctx, backstop.DiscardParams{ID: "disc", Reason: "oops", Actor: "dave"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"res", "res-copy"} {
		if _, err := b.c.Resolve(b.ctx, backstop.ResolveParams{ID: id, Note: "oops", Actor: "erin"}); err != nil {
			t.Fatal(err)
		}
	}

	// Without Reopen: refused, nothing changes.
	for _, id := range []string{"disc", "res"} {
		before := b.get(id)
		r := b.replay(backstop.ReplayParams{ID: id})
		eq(t, id+" replayed without reopen", r.Replayed, false)
		unchanged(t, before, b.get(id))
	}

	// With Reopen: in place, back to pending under the same id.
	for _, c := range []struct {
		id   string
		from backstop.DLQStatus
	}{{"disc", backstop.DLQDiscarded}, {"res", backstop.DLQResolved}} {
		r := b.replay(backstop.ReplayParams{ID: c.id, Reopen: true, Actor: "admin-ann"})
		eq(t, c.id+" replayed", r.Replayed, true)
		got := b.get(c.id)
		eq(t, c.id+" state", got.State, backstop.StatePending)
		eq(t, c.id+" replay_count", got.ReplayCount, 1)
		from := replayedFrom(t, b, c.id)
		eq(t, c.id+" dlq.replayed actor", from.actor, "admin-ann")
		eq(t, c.id+" dlq.replayed from_status", from.status, string(c.from))
		eq(t, c.id+" dlq.replay_requested reopen", from.reopen, true)
	}

	// As a copy: the original is marked replayed, the copy runs.
	r := b.replay(backstop.ReplayParams{ID: "res-copy", Reopen: true, NewID: true, Actor: "admin-ann"})
	if !r.Replayed || r.NewID == "" {
		t.Fatalf("reopen as a copy: %+v", r)
	}
	eq(t, "original status", b.get("res-copy").DLQStatus, backstop.DLQReplayed)
	eq(t, "copy state", b.get(r.NewID).State, backstop.StatePending)
	eq(t, "copy from_status", replayedFrom(t, b, "res-copy").status, string(backstop.DLQResolved))
	// A replayed record is not replayed again, even with Reopen.
	eq(t, "replay a replayed record", b.replay(backstop.ReplayParams{ID: "res-copy", Reopen: true}).Replayed, false)

	// An open one replays as before, recording from_status open.
	b.replay(backstop.ReplayParams{ID: "twice", Actor: "op"})
	eq(t, "open from_status", replayedFrom(t, b, "twice").status, string(backstop.DLQOpen))
}

type replayRecord struct {
	actor, status string
	reopen        bool
}

// replayedFrom reads the last dlq.replayed event's actor and from_status
// and whether the last dlq.replay_requested says reopen.
func replayedFrom(t *testing.T, b *bundle, id string) replayRecord {
	t.Helper()
	evs, err := b.c.Events(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var out replayRecord
	for _, e := range evs {
		var body struct {
			FromStatus string `json:"from_status"`
			Reopen     bool   `json:"reopen"`
		}
		switch e.Type {
		case "dlq.replayed":
			if err := json.Unmarshal(e.Body, &body); err != nil {
				t.Fatal(err)
			}
			out.actor, out.status = e.Actor, body.FromStatus
		case "dlq.replay_requested":
			if err := json.Unmarshal(e.Body, &body); err != nil {
				t.Fatal(err)
			}
			out.reopen = body.Reopen
		}
	}
	return out
}
