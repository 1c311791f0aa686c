package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

var _ store.Queues = (*Store)(nil)

// PauseQueue implements store.Queues.
func (s *Store) PauseQueue(ctx context.Context, name, actor string, now time.Time, ev bt.Event) (store.QueueState, bool, error) {
	var st store.QueueState
	var inserted bool
	err := s.inTxWithEvent(ctx, ev, func(tx pgx.Tx) (bool, error) {
		// The CTE inserts unless the queue is paused already; the union
		// reads the row either way, in one statement.
		err := tx.QueryRow(ctx, `WITH ins AS (
		INSERT INTO backstop_queues (name, paused_at, paused_by) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO NOTHING RETURNING name, paused_at, paused_by)
	SELECT name, paused_at, paused_by, true FROM ins
	UNION ALL
	SELECT name, paused_at, paused_by, false FROM backstop_queues WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM ins)`,
			name, now, actor).Scan(&st.Name, &st.PausedAt, &st.PausedBy, &inserted)
		return inserted, err
	})
	if err != nil {
		return store.QueueState{}, false, fmt.Errorf("pgstore: pause queue: %w", err)
	}
	st.PausedAt = st.PausedAt.UTC()
	return st, inserted, nil
}

// ResumeQueue implements store.Queues. Resuming wakes the queue's workers.
func (s *Store) ResumeQueue(ctx context.Context, name string, ev bt.Event) (bool, error) {
	var n int
	err := s.inTxWithEvent(ctx, ev, func(tx pgx.Tx) (bool, error) {
		err := tx.QueryRow(ctx, `WITH del AS (DELETE FROM backstop_queues WHERE name = $1 RETURNING name)
	SELECT count(pg_notify('`+wakeupChannel+`', name)) FROM del`, name).Scan(&n)
		return n > 0, err
	})
	if err != nil {
		return false, fmt.Errorf("pgstore: resume queue: %w", err)
	}
	return n > 0, nil
}

// inTxWithEvent runs change in a transaction and, when it reports a
// change, appends ev (unless its Type is empty) before the commit: an
// operator's action and its audit event commit together.
func (s *Store) inTxWithEvent(ctx context.Context, ev bt.Event, change func(pgx.Tx) (bool, error)) error {
	t := s.Txs()
	tx, err := t.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
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
