package sqldialect

import (
	"context"
	"fmt"

	"github.com/backstophq/backstop/store"
)

// This file is store.IngestPositions.

const ingestPositionColumns = `group_name, topic, queue, holder, lag_messages, lag_from, updated_at, last_error, last_error_at`

// SaveIngestPosition implements store.IngestPositions.
func (p *Procedures) SaveIngestPosition(ctx context.Context, pos store.IngestPosition) error {
	_, err := p.writer.Exec(ctx, `INSERT INTO backstop_ingest_positions (`+ingestPositionColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (group_name, topic) DO UPDATE SET queue = excluded.queue, holder = excluded.holder,
			lag_messages = excluded.lag_messages, lag_from = excluded.lag_from, updated_at = excluded.updated_at,
			last_error = excluded.last_error, last_error_at = excluded.last_error_at`,
		pos.Group, pos.Topic, pos.Queue, pos.Holder, pos.LagMessages, pos.LagFrom, pos.UpdatedAt, pos.LastError, pos.LastErrorAt)
	if err != nil {
		return fmt.Errorf("%s: save ingest position %s/%s: %w", p.dialect.Prefix, pos.Group, pos.Topic, p.dialect.Err(err))
	}
	return nil
}

// ListIngestPositions implements store.IngestPositions.
func (p *Procedures) ListIngestPositions(ctx context.Context) ([]store.IngestPosition, error) {
	rows, err := p.reader.Query(ctx, `SELECT `+ingestPositionColumns+` FROM backstop_ingest_positions ORDER BY group_name, topic`)
	if err != nil {
		return nil, fmt.Errorf("%s: ingest positions: %w", p.dialect.Prefix, err)
	}
	defer rows.Close()
	out := []store.IngestPosition{}
	for rows.Next() {
		var c store.IngestPosition
		if err := rows.Scan(&c.Group, &c.Topic, &c.Queue, &c.Holder, &c.LagMessages, &c.LagFrom, &c.UpdatedAt, &c.LastError, &c.LastErrorAt); err != nil {
			return nil, fmt.Errorf("%s: ingest positions: %w", p.dialect.Prefix, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: ingest positions: %w", p.dialect.Prefix, err)
	}
	return out, nil
}
