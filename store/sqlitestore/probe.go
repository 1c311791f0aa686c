package sqlitestore

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/backstophq/backstop/store"
)

// ProbeWrite: store.Ops. The row (16 KiB) needs pages the database may
// not have (max_page_count, a file that cannot grow); the free-space check
// covers a full disk, which a rolled-back transaction never touches.
func (s *Store) ProbeWrite(ctx context.Context) error {
	if free, ok := freeBytes(filepath.Dir(s.path)); ok && free < store.MinFreeBytes {
		return &store.UnavailableError{Cause: store.CauseDiskFull,
			Err: fmt.Errorf("sqlite: %d bytes free on the file system of %s (at least %d needed)", free, s.path, store.MinFreeBytes)}
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return store.Classify(fmt.Errorf("sqlite: write probe: %w", err))
	}
	defer tx.Rollback() //nolint:errcheck // the probe is always rolled back
	if _, err := tx.ExecContext(ctx, `INSERT INTO backstop_event_checkpoints (name, cursor, updated_at)
		VALUES (?, hex(zeroblob(8192)), 0)`, store.ProbeRow); err != nil {
		return store.Classify(fmt.Errorf("sqlite: write probe: %w", err))
	}
	return nil
}
