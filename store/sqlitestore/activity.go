package sqlitestore

import (
	"context"
	"fmt"
	"time"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/internal/sqldialect"
)

// activityExprs are the finished-work read's SQL on times stored as
// INTEGER microseconds.
var activityExprs = sqldialect.ActivityExprs{
	Bucket:    func(col string, seconds int64) string { return fmt.Sprintf("(%s / %d)", col, seconds*1000000) },
	Micros:    func(a, b string) string { return fmt.Sprintf("((%s) - (%s))", a, b) },
	HistIndex: sqldialect.HistCase,
}

// FinishedWork implements store.ActivityRollup.
func (s *Store) FinishedWork(ctx context.Context, since, until time.Time, width time.Duration, bounds []int64) ([]store.ActivityRow, error) {
	return s.ReadFinishedWork(ctx, activityExprs, since, until, width, bounds)
}
