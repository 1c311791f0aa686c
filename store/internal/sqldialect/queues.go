package sqldialect

import (
	"context"
	"fmt"

	"github.com/backstophq/backstop/store"
)

// PausedQueues implements store.Queues (pausing and resuming, which wake
// workers each driver's way, stay in the drivers).
func (p *Procedures) PausedQueues(ctx context.Context) ([]store.QueueState, error) {
	d, q := p.dialect, p.reader
	rows, err := q.Query(ctx, `SELECT name, paused_at, paused_by FROM backstop_queues ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("%s: paused queues: %w", d.Prefix, err)
	}
	defer rows.Close()
	out := []store.QueueState{}
	for rows.Next() {
		var st store.QueueState
		if err := rows.Scan(&st.Name, &st.PausedAt, &st.PausedBy); err != nil {
			return nil, fmt.Errorf("%s: paused queues: %w", d.Prefix, err)
		}
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: paused queues: %w", d.Prefix, err)
	}
	return out, nil
}
