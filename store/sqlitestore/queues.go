package sqlitestore

import (
	"context"
	"fmt"
	"time"

	"github.com/backstophq/backstop/store"
)

var _ store.Queues = (*Store)(nil)

// PauseQueue implements store.Queues.
func (s *Store) PauseQueue(ctx context.Context, name, actor string, now time.Time) (store.QueueState, bool, error) {
	res, err := s.w.ExecContext(ctx, `INSERT INTO backstop_queues (name, paused_at, paused_by) VALUES (?, ?, ?)
		ON CONFLICT (name) DO NOTHING`, name, us(now), actor)
	if err != nil {
		return store.QueueState{}, false, fmt.Errorf("sqlite: pause queue: %w", err)
	}
	n, _ := res.RowsAffected()
	var st store.QueueState
	var at int64
	if err := s.w.QueryRowContext(ctx, `SELECT name, paused_at, paused_by FROM backstop_queues WHERE name = ?`, name).
		Scan(&st.Name, &at, &st.PausedBy); err != nil {
		return store.QueueState{}, false, fmt.Errorf("sqlite: pause queue: %w", err)
	}
	st.PausedAt = fromUS(at)
	return st, n > 0, nil
}

// ResumeQueue implements store.Queues.
func (s *Store) ResumeQueue(ctx context.Context, name string) (bool, error) {
	res, err := s.w.ExecContext(ctx, `DELETE FROM backstop_queues WHERE name = ?`, name)
	if err != nil {
		return false, fmt.Errorf("sqlite: resume queue: %w", err)
	}
	n, _ := res.RowsAffected()
	if n > 0 {
		s.hub.notify(map[string]struct{}{name: {}})
	}
	return n > 0, nil
}
