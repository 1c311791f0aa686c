package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/backstophq/backstop/store"
)

var _ store.Queues = (*Store)(nil)

// PauseQueue implements store.Queues.
func (s *Store) PauseQueue(ctx context.Context, name, actor string, now time.Time) (store.QueueState, bool, error) {
	var st store.QueueState
	var inserted bool
	// The CTE inserts unless the queue is paused already; the union reads
	// the row either way, in one statement.
	err := s.pool.QueryRow(ctx, `WITH ins AS (
		INSERT INTO backstop_queues (name, paused_at, paused_by) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO NOTHING RETURNING name, paused_at, paused_by)
	SELECT name, paused_at, paused_by, true FROM ins
	UNION ALL
	SELECT name, paused_at, paused_by, false FROM backstop_queues WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM ins)`,
		name, now, actor).Scan(&st.Name, &st.PausedAt, &st.PausedBy, &inserted)
	if err != nil {
		return store.QueueState{}, false, fmt.Errorf("pgstore: pause queue: %w", err)
	}
	st.PausedAt = st.PausedAt.UTC()
	return st, inserted, nil
}

// ResumeQueue implements store.Queues. Resuming wakes the queue's workers.
func (s *Store) ResumeQueue(ctx context.Context, name string) (bool, error) {
	var n int
	err := s.pool.QueryRow(ctx, `WITH del AS (DELETE FROM backstop_queues WHERE name = $1 RETURNING name)
	SELECT count(pg_notify('`+wakeupChannel+`', name)) FROM del`, name).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("pgstore: resume queue: %w", err)
	}
	return n > 0, nil
}
