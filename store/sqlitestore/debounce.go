package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// TaskDebounce implements store.Store.
func (s *Store) TaskDebounce(ctx context.Context, id string) (*bt.TaskDebounce, error) {
	var (
		key          sql.NullString
		forUS, until sql.NullInt64
	)
	err := s.r.QueryRowContext(ctx, `SELECT merge_key, debounce_for_us, debounce_until FROM backstop_tasks WHERE id = ?`, id).
		Scan(&key, &forUS, &until)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: task %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: task %s: debounce: %w", id, err)
	}
	if !forUS.Valid || !key.Valid {
		return nil, nil
	}
	return &bt.TaskDebounce{Key: key.String, For: bt.Duration(time.Duration(forUS.Int64) * time.Microsecond),
		MaxWaitUntil: fromNullUS(until)}, nil
}
