package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
)

// testWhereBudget: a where evaluated in Go runs under the configured
// budget (Config.WhereCost): spent, every entry that evaluates it —
// listing, grouped counts, export, a redrive and its dry run, close by
// filter, purge — answers ErrInvalid naming where and ErrWhereBudget, and
// the bulk ones change nothing; the same where under a larger budget
// works.
func (s *suite) testWhereBudget(t *testing.T) {
	t.Parallel()
	b := s.setup(t, &backstop.Config{WhereCost: 500})
	for i := range 30 {
		b.dead(backstop.EnqueueParams{ID: fmt.Sprintf("wb-%02d", i), Queue: "wb", Kind: "k",
			Payload: json.RawMessage(fmt.Sprintf(`{"tags":["a","b","c","d"],"n":%d}`, i))})
	}
	const where = `payload.tags.exists(t, t == "z") || payload.n >= 0`
	f := backstop.ListParams{Queue: "wb", Where: where}
	spent := func(what string, err error) {
		t.Helper()
		var ve *backstop.ValidationError
		if !errors.Is(err, backstop.ErrWhereBudget) || !errors.Is(err, backstop.ErrInvalid) || !errors.As(err, &ve) ||
			ve.Field != "where" || !strings.Contains(err.Error(), "limits.where_cost") {
			t.Fatalf("%s: %v, want ErrWhereBudget naming where and limits.where_cost", what, err)
		}
	}
	_, err := b.c.List(b.ctx, f)
	spent("list", err)
	_, err = b.c.DeadLetterGroupCounts(b.ctx, f, 0)
	spent("groups", err)
	_, err = b.c.ExportDLQ(b.ctx, f, func(backstop.DeadLetterExport) error { return nil })
	spent("export", err)
	_, err = b.c.Redrive(b.ctx, backstop.RedriveParams{Filter: f, DryRun: true}, nil)
	spent("redrive dry run", err)
	_, err = b.c.Redrive(b.ctx, backstop.RedriveParams{Filter: f}, nil)
	spent("redrive", err)
	_, err = b.c.CloseMatching(b.ctx, backstop.CloseMatchingParams{Filter: f, Status: backstop.DLQResolved, Note: "n"})
	spent("close", err)
	_, err = b.c.PurgeDLQ(b.ctx, backstop.PurgeParams{Statuses: []backstop.DLQStatus{backstop.DLQOpen}, ConfirmOpen: true, Where: where})
	spent("purge", err)
	eq(t, "open dead letters after the refused bulk actions",
		len(mustDL(t, b, backstop.ListParams{Queue: "wb", DLQStatuses: []backstop.DLQStatus{backstop.DLQOpen}})), 30)

	big := s.setup(t, &backstop.Config{WhereCost: 1_000_000})
	for i := range 3 {
		big.dead(backstop.EnqueueParams{ID: fmt.Sprintf("wb-%02d", i), Queue: "wb", Kind: "k",
			Payload: json.RawMessage(fmt.Sprintf(`{"tags":["a"],"n":%d}`, i))})
	}
	res, err := big.c.Redrive(big.ctx, backstop.RedriveParams{Filter: f}, nil)
	if err != nil || res.Replayed != 3 {
		t.Fatalf("redrive under a larger budget: %+v %v", res, err)
	}
}
