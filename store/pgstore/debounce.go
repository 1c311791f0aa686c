package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// TaskDebounce implements store.Store.
func (s *Store) TaskDebounce(ctx context.Context, id string) (*bt.TaskDebounce, error) {
	var (
		key   *string
		forUS *int64
		until pgtype.Timestamptz
	)
	err := s.pool.QueryRow(ctx, `SELECT merge_key, debounce_for_us, debounce_until FROM backstop_tasks WHERE id = $1`, id).
		Scan(&key, &forUS, &until)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgstore: task %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: task %s: debounce: %w", id, err)
	}
	if forUS == nil || key == nil {
		return nil, nil
	}
	d := &bt.TaskDebounce{Key: *key, For: bt.Duration(time.Duration(*forUS) * time.Microsecond)}
	if until.Valid && until.InfinityModifier == pgtype.Finite {
		at := utc(until.Time)
		d.MaxWaitUntil = &at
	}
	return d, nil
}
