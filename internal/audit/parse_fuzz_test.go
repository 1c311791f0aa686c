package audit

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
)

// Parse either builds a query every filter of which holds what was given,
// or refuses with a ValidationError naming one of its inputs; it never
// panics.
func FuzzParse(f *testing.F) {
	for _, s := range [][7]string{
		{"", "", "", "", "", "", ""},
		{"ci", "queue.paused,queue.resumed", "24h", "1h", "billing", "0-12-1", "10"},
		{"", "task.enqueued", "", "", "", "", ""},
		{"", "queue.paused,", "yesterday", "", "", "", ""},
		{"", "", "2026-01-01T00:00:00Z", "2025-01-01T00:00:00Z", "", "x", "0"},
		{"\x00", "", "1d12h", "-3h", "\xff", "", "1001"},
		{"", " dlq.discarded ", "99999999d", "", "", "", "abc"},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5], s[6])
	}
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, actor, typ, since, until, target, after, limit string) {
		q, err := Parse(Params{Actor: actor, Type: typ, Since: since, Until: until, Target: target, After: after, Limit: limit}, now)
		if err != nil {
			var ve *backstop.ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, backstop.ErrInvalid) ||
				!slices.Contains([]string{"actor", "type", "since", "until", "target", "after", "limit"}, ve.Field) {
				t.Fatalf("error %v (%T) names no input", err, err)
			}
			return
		}
		for _, ty := range q.Types {
			if !store.IsAuditType(ty) {
				t.Fatalf("type %q accepted", ty)
			}
		}
		if q.Actor != actor || q.Target != target || q.After != after || q.Limit < 0 || q.Limit > MaxLimit {
			t.Fatalf("query %+v from %q %q %q %q", q, actor, target, after, limit)
		}
		if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
			t.Fatalf("since %v not before until %v", q.Since, q.Until)
		}
	})
}
