package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/internal/sqldialect"
)

// activityExprs are the finished-work read's SQL on timestamptz columns.
var activityExprs = sqldialect.ActivityExprs{
	Bucket: func(col string, seconds int64) string {
		return fmt.Sprintf("floor(extract(epoch FROM %s) / %d)::bigint", col, seconds)
	},
	Micros: func(a, b string) string {
		return fmt.Sprintf("(extract(epoch FROM (%s) - (%s)) * 1000000)::bigint", a, b)
	},
	// width_bucket with an array of thresholds: a binary search, where a
	// CASE would evaluate the inlined duration once per arm.
	HistIndex: func(col string, bounds []int64) string {
		parts := make([]string, len(bounds))
		for i, b := range bounds {
			parts[i] = strconv.FormatInt(b, 10)
		}
		return fmt.Sprintf("width_bucket(%s, ARRAY[%s]::bigint[])", col, strings.Join(parts, ","))
	},
}

// FinishedWork implements store.ActivityRollup.
func (s *Store) FinishedWork(ctx context.Context, since, until time.Time, width time.Duration, bounds []int64) ([]store.ActivityRow, error) {
	return s.ReadFinishedWork(ctx, activityExprs, since, until, width, bounds)
}
