package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

var _ store.Queues = (*Store)(nil)

// PauseQueue implements store.Queues.
func (s *Store) PauseQueue(ctx context.Context, name, actor string, now time.Time, ev bt.Event) (store.QueueState, bool, error) {
	var st store.QueueState
	var n int64
	err := s.inTxWithEvent(ctx, ev, func(tx *sql.Tx) (bool, error) {
		res, err := tx.ExecContext(ctx, `INSERT INTO backstop_queues (name, paused_at, paused_by) VALUES (?, ?, ?)
		ON CONFLICT (name) DO NOTHING`, name, us(now), actor)
		if err != nil {
			return false, err
		}
		n, _ = res.RowsAffected()
		var at int64
		if err := tx.QueryRowContext(ctx, `SELECT name, paused_at, paused_by FROM backstop_queues WHERE name = ?`, name).
			Scan(&st.Name, &at, &st.PausedBy); err != nil {
			return false, err
		}
		st.PausedAt = fromUS(at)
		return n > 0, nil
	})
	if err != nil {
		return store.QueueState{}, false, fmt.Errorf("sqlite: pause queue: %w", err)
	}
	return st, n > 0, nil
}

// ResumeQueue implements store.Queues.
func (s *Store) ResumeQueue(ctx context.Context, name string, ev bt.Event) (bool, error) {
	var n int64
	err := s.inTxWithEvent(ctx, ev, func(tx *sql.Tx) (bool, error) {
		res, err := tx.ExecContext(ctx, `DELETE FROM backstop_queues WHERE name = ?`, name)
		if err != nil {
			return false, err
		}
		n, _ = res.RowsAffected()
		return n > 0, nil
	})
	if err != nil {
		return false, fmt.Errorf("sqlite: resume queue: %w", err)
	}
	if n > 0 {
		s.hub.notify(map[string]struct{}{name: {}})
	}
	return n > 0, nil
}

// inTxWithEvent runs change in a writer transaction and, when it reports
// a change, appends ev (unless its Type is empty) before the commit: an
// operator's action and its audit event commit together.
func (s *Store) inTxWithEvent(ctx context.Context, ev bt.Event, change func(*sql.Tx) (bool, error)) error {
	t := s.Txs()
	tx, err := t.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	changed, err := change(tx)
	if err != nil {
		return err
	}
	if changed && ev.Type != "" {
		if err := t.AppendEvents(ctx, tx, []bt.Event{ev}); err != nil {
			return err
		}
	}
	return t.Commit(ctx, tx)
}
