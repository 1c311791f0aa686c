package storetest

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
)

// testPurgeWhereAndFloor: a purge with a where deletes only the closed dead
// letters the condition matches, whether the condition is evaluated in SQL
// (spilled payloads included) or in Go; an invalid where deletes nothing.
// A purge younger than Config.PurgeFloor is refused (naming purge_floor and
// both ages) unless BelowFloor, which the dlq.purged event records; and
// retention keeps closed dead letters for the floor when its own age is
// shorter.
func (s *suite) testPurgeWhereAndFloor(t *testing.T) {
	t.Parallel()
	b := s.setup(t, &backstop.Config{InlinePayloadLimit: 64, PurgeFloor: 24 * time.Hour,
		Retention: backstop.RetentionConfig{DeadLetters: time.Hour}})
	payloads := map[string]string{
		"a-1":    `{"cause":"a","n":1}`,
		"a-2":    `{"cause":"a","n":2}`,
		"a-big":  `{"cause":"a","pad":"` + strings.Repeat("x", 200) + `"}`, // spilled
		"b-1":    `{"cause":"b","n":1}`,
		"b-2":    `{"cause":"b","n":2}`,
		"a-open": `{"cause":"a","n":3}`,
	}
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for id := range payloads {
			if !yield(id) {
				return
			}
		}
	}) {
		b.enqueue(backstop.EnqueueParams{ID: id, Queue: "pw", Kind: "k", Payload: []byte(payloads[id]),
			Attributes: map[string]string{"tenant": id[:1]}})
	}
	b.kill("pw", "broken")
	for id := range payloads {
		if id == "a-open" {
			continue
		}
		if _, err := b.c.Discard(b.ctx, backstop.DiscardParams{ID: id, Reason: "obsolete"}); err != nil {
			t.Fatal(err)
		}
	}
	left := func() string {
		t.Helper()
		ts, err := b.c.DeadLetters(b.ctx, backstop.ListParams{Queue: "pw", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, x := range ts {
			out = append(out, x.ID)
		}
		return strings.Join(out, ",")
	}
	all := "a-1,a-2,a-big,a-open,b-1,b-2"
	b.clock.Advance(2 * time.Hour)

	// The floor: 1h is below 24h.
	n, err := b.c.PurgeDLQ(b.ctx, backstop.PurgeParams{OlderThan: time.Hour})
	var ve *backstop.ValidationError
	if !errors.As(err, &ve) || n != 0 || !strings.Contains(ve.Message, "purge_floor") ||
		!strings.Contains(ve.Message, "1h") || !strings.Contains(ve.Message, "24h") {
		t.Fatalf("purge below the floor: %d, %v", n, err)
	}
	eq(t, "after the refused purge", left(), all)
	// An invalid where, whatever the rest: nothing deleted.
	for _, w := range []string{`payload.cause ==`, `payload.cause + 1`, `nope.cause == "a"`} {
		n, err = b.c.PurgeDLQ(b.ctx, backstop.PurgeParams{OlderThan: time.Hour, BelowFloor: true, Where: w})
		if !errors.As(err, &ve) || ve.Field != "where" || n != 0 {
			t.Fatalf("where %q: %d, %v", w, n, err)
		}
	}
	eq(t, "after the invalid wheres", left(), all)

	below := backstop.PurgeParams{OlderThan: time.Hour, BelowFloor: true}
	count := func(where string) int {
		t.Helper()
		p := below
		p.Where, p.DryRun = where, true
		n, err := b.c.PurgeDLQ(b.ctx, p)
		if err != nil {
			t.Fatalf("dry run %q: %v", where, err)
		}
		return n
	}
	eq(t, "dry run, in SQL", count(`payload.cause == "a"`), 3)
	eq(t, "dry run, in SQL, attributes", count(`attributes.tenant == "b" && payload.n == 2`), 1)
	eq(t, "dry run, in Go", count(`payload.cause.startsWith("b")`), 2)
	eq(t, "dry run, matching nothing", count(`payload.cause == "z"`), 0)
	eq(t, "after the dry runs", left(), all)

	p := below
	p.Where, p.Reason, p.Actor = `payload.cause == "a"`, "cause a fixed", "ops"
	if n, err := b.c.PurgeDLQ(b.ctx, p); err != nil || n != 3 {
		t.Fatalf("purge where in SQL: %d, %v", n, err)
	}
	eq(t, "after the purge in SQL (the open one stays)", left(), "a-open,b-1,b-2")
	for _, id := range []string{"a-1", "a-big"} {
		eq(t, id+" events purged", b.events(id), []string{})
	}
	p.Where = `int(payload.n) % 2 == 0 && payload.cause.startsWith("b")`
	if n, err := b.c.PurgeDLQ(b.ctx, p); err != nil || n != 1 {
		t.Fatalf("purge where in Go: %d, %v", n, err)
	}
	eq(t, "after the purge in Go", left(), "a-open,b-1")
	evs := b.readStream("type.dlq.purged", 2)
	var body map[string]any
	if err := json.Unmarshal(evs[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if body["where"] != `payload.cause == "a"` || body["below_floor"] != true || body["purge_floor"] != "24h0m0s" ||
		body["purged"] != 3.0 || body["reason"] != "cause a fixed" || evs[0].Actor != "ops" {
		t.Fatalf("dlq.purged: %s by %s", evs[0].Body, evs[0].Actor)
	}

	// At the floor no confirmation is needed.
	b.clock.Advance(23 * time.Hour)
	if n, err := b.c.PurgeDLQ(b.ctx, backstop.PurgeParams{OlderThan: 24 * time.Hour, DryRun: true}); err != nil || n != 1 {
		t.Fatalf("purge at the floor: %d, %v", n, err)
	}

	// Retention (1h here) keeps closed dead letters for the floor (24h).
	b.enqueue(backstop.EnqueueParams{ID: "young", Queue: "pw2", Kind: "k"})
	b.kill("pw2", "broken")
	if _, err := b.c.Discard(b.ctx, backstop.DiscardParams{ID: "young", Reason: "obsolete"}); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(2 * time.Hour)
	if _, err := backstop.Retain(b.ctx, b.c); err != nil {
		t.Fatal(err)
	}
	eq(t, "young after retention, past its 1h, before the floor", b.get("young").State, backstop.StateDead)
	if _, err := b.c.Get(b.ctx, "b-1"); !errors.Is(err, backstop.ErrNotFound) {
		t.Fatalf("b-1, closed 25h ago, survived retention: %v", err)
	}
	b.clock.Advance(23 * time.Hour)
	if _, err := backstop.Retain(b.ctx, b.c); err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.Get(b.ctx, "young"); !errors.Is(err, backstop.ErrNotFound) {
		t.Fatalf("young, closed 25h ago, survived retention: %v", err)
	}
	eq(t, "the open one", b.get("a-open").DLQStatus, backstop.DLQOpen)
}
