package sqldialect

import (
	"context"
	"errors"
	"fmt"

	"github.com/backstophq/backstop/store"
)

// This file is store.RelayCheckpoints.

const relayCheckpointColumns = `name, stream, sink, cursor, updated_at, published, duplicates, last_error, last_error_at`

func scanRelayCheckpoint(row Row) (store.RelayCheckpoint, error) {
	var c store.RelayCheckpoint
	err := row.Scan(&c.Name, &c.Stream, &c.Sink, &c.Cursor, &c.UpdatedAt, &c.Published, &c.Duplicates, &c.LastError, &c.LastErrorAt)
	return c, err
}

// RelayCheckpoint implements store.RelayCheckpoints.
func (p *Procedures) RelayCheckpoint(ctx context.Context, name, stream string) (store.RelayCheckpoint, error) {
	c, err := scanRelayCheckpoint(p.reader.QueryRow(ctx, `SELECT `+relayCheckpointColumns+`
		FROM backstop_relay_checkpoints WHERE name = $1 AND stream = $2`, name, stream))
	if errors.Is(err, ErrNoRows) {
		return c, fmt.Errorf("relay checkpoint %q stream %q: %w", name, stream, store.ErrNotFound)
	}
	if err != nil {
		return c, fmt.Errorf("%s: relay checkpoint %s: %w", p.dialect.Prefix, name, err)
	}
	return c, nil
}

// SaveRelayCheckpoint implements store.RelayCheckpoints.
func (p *Procedures) SaveRelayCheckpoint(ctx context.Context, u store.RelayCheckpointUpdate) error {
	var errAt any
	if u.Error != "" {
		errAt = u.Now
	}
	conflict := `ON CONFLICT (name, stream) DO NOTHING`
	if !u.Create {
		conflict = relayCheckpointMove
	}
	_, err := p.writer.Exec(ctx, `INSERT INTO backstop_relay_checkpoints (`+relayCheckpointColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) `+conflict,
		u.Name, u.Stream, u.Sink, u.Cursor, u.Now, u.AddPublished, u.AddDuplicates, u.Error, errAt)
	if err != nil {
		return fmt.Errorf("%s: save relay checkpoint %s: %w", p.dialect.Prefix, u.Name, p.dialect.Err(err))
	}
	return nil
}

// relayCheckpointMove moves an existing checkpoint row (SaveRelayCheckpoint).
const relayCheckpointMove = `ON CONFLICT (name, stream) DO UPDATE SET sink = excluded.sink, cursor = excluded.cursor,
			updated_at = excluded.updated_at,
			published = backstop_relay_checkpoints.published + excluded.published,
			duplicates = backstop_relay_checkpoints.duplicates + excluded.duplicates,
			last_error = CASE WHEN excluded.last_error <> '' OR excluded.published > 0 THEN excluded.last_error
				ELSE backstop_relay_checkpoints.last_error END,
			last_error_at = CASE WHEN excluded.last_error <> '' THEN excluded.last_error_at
				WHEN excluded.published > 0 THEN NULL ELSE backstop_relay_checkpoints.last_error_at END`

// ListRelayCheckpoints implements store.RelayCheckpoints.
func (p *Procedures) ListRelayCheckpoints(ctx context.Context) ([]store.RelayCheckpoint, error) {
	rows, err := p.reader.Query(ctx, `SELECT `+relayCheckpointColumns+` FROM backstop_relay_checkpoints ORDER BY name, stream`)
	if err != nil {
		return nil, fmt.Errorf("%s: relay checkpoints: %w", p.dialect.Prefix, err)
	}
	defer rows.Close()
	out := []store.RelayCheckpoint{}
	for rows.Next() {
		c, err := scanRelayCheckpoint(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: relay checkpoints: %w", p.dialect.Prefix, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: relay checkpoints: %w", p.dialect.Prefix, err)
	}
	return out, nil
}
