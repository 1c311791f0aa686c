package store

import "context"

// CountKeeper keeps the counts CountByQueue reads, where a store keeps
// them instead of counting the tasks (PostgreSQL: every write of tasks
// appends its change as a delta in its own transaction). The maintenance
// service task_counts calls it; a store that counts its rows on each read
// (SQLite) has nothing to fold and never drifts.
type CountKeeper interface {
	// FoldCounts adds the committed deltas into the kept counts, in one
	// transaction, and answers how many groups it touched. The counts
	// read the same before and after.
	FoldCounts(ctx context.Context) (int, error)
	// ReconcileCounts counts the tasks and corrects the kept counts by the
	// difference, both read in one snapshot, and answers the correction
	// (zero unless a write of tasks bypassed the keeping).
	ReconcileCounts(ctx context.Context) (CountDrift, error)
}

// CountDrift is what one ReconcileCounts corrected.
type CountDrift struct {
	// Groups is how many (queue, state, dead-letter status) counts were
	// wrong; Tasks is the sum of their errors' sizes.
	Groups, Tasks int
}

// ListReadSorted says whether a state-filtered list page is read through
// its states' partial indexes and sorted, rather than by a walk of the
// primary key in id order, when those indexes hold read rows of a table
// of total tasks (both from the kept counts). A sorted read costs what
// the states hold, whatever the finished history; a walk stops at the
// page's last match, early when matches are many. So: sorted when the
// indexes hold at most 10,000 rows, or at most 1/100 of the table (a walk
// would then pass about 100 rows for each match, all of them when the
// matches sort last).
func ListReadSorted(read, total int64) bool {
	const fewRows, sparse = 10_000, 100
	return read <= fewRows || read*sparse <= total
}
