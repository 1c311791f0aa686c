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
