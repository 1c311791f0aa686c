package pgstore

import (
	"context"
	"fmt"

	"github.com/backstophq/backstop/store"
)

// ProbeWrite: store.Ops. A lost connection, a server in recovery or
// shutting down, or a full disk the row's pages run into fails it.
func (s *Store) ProbeWrite(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return store.Classify(fmt.Errorf("pgstore: write probe: %w", err))
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // the probe is always rolled back
	if _, err := tx.Exec(ctx, `INSERT INTO backstop_event_checkpoints (name, cursor, updated_at)
		VALUES ($1, repeat('0', 16384), now())`, store.ProbeRow); err != nil {
		return store.Classify(fmt.Errorf("pgstore: write probe: %w", err))
	}
	return nil
}
