package sqldialect

import (
	"context"
	"errors"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// RotateSecret implements store.Secrets: in one transaction, the current
// row locked (PostgreSQL), copied to the previous row, then replaced, and
// events (the rotation's record) appended.
func (p *Procedures) RotateSecret(ctx context.Context, name string, fresh []byte, now, previousUntil time.Time, events ...bt.Event) error {
	d := p.dialect
	err := InTx(ctx, p.writer, func(tx Tx) error {
		var cur []byte
		err := tx.QueryRow(ctx, `SELECT value FROM backstop_secrets WHERE name = $1`+d.ForUpdate, name).Scan(&cur)
		switch {
		case errors.Is(err, ErrNoRows):
			if _, err = tx.Exec(ctx, `INSERT INTO backstop_secrets (name, value, created_at) VALUES ($1, $2, $3)`, name, fresh, now); err != nil {
				return err
			}
			return d.TaskEvents(ctx, tx, events)
		case err != nil:
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO backstop_secrets (name, value, created_at) VALUES ($1, $2, $3)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value, created_at = excluded.created_at`,
			name+store.PreviousSecret, cur, previousUntil); err != nil {
			return err
		}
		if _, err = tx.Exec(ctx, `UPDATE backstop_secrets SET value = $2, created_at = $3 WHERE name = $1`, name, fresh, now); err != nil {
			return err
		}
		return d.TaskEvents(ctx, tx, events)
	})
	if err != nil {
		return fmt.Errorf("%s: rotate secret %s: %w", d.Prefix, name, d.Err(err))
	}
	return nil
}

// SecretVersions implements store.Secrets in one read.
func (p *Procedures) SecretVersions(ctx context.Context, name string) (current, previous []byte, previousUntil time.Time, err error) {
	d := p.dialect
	rows, err := p.reader.Query(ctx, `SELECT name, value, created_at FROM backstop_secrets WHERE name IN ($1, $2)`, name, name+store.PreviousSecret)
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("%s: secret %s: %w", d.Prefix, name, d.Err(err))
	}
	defer rows.Close()
	for rows.Next() {
		var (
			n  string
			v  []byte
			at time.Time
		)
		if err := rows.Scan(&n, &v, &at); err != nil {
			return nil, nil, time.Time{}, fmt.Errorf("%s: secret %s: %w", d.Prefix, name, err)
		}
		if n == name {
			current = v
		} else {
			previous, previousUntil = v, at
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("%s: secret %s: %w", d.Prefix, name, d.Err(err))
	}
	return current, previous, previousUntil, nil
}

// Secret implements store.Secrets in two statements: insert if absent,
// then read back. On PostgreSQL the insert waits for a concurrent insert
// of the same name to commit or roll back, and the read (a new snapshot)
// then sees the value that won; SQLite has one writer.
func (p *Procedures) Secret(ctx context.Context, name string, candidate []byte, now time.Time) ([]byte, error) {
	d, q := p.dialect, p.writer
	if _, err := q.Exec(ctx, `INSERT INTO backstop_secrets (name, value, created_at) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO NOTHING`, name, candidate, now); err != nil {
		return nil, fmt.Errorf("%s: secret %s: %w", d.Prefix, name, err)
	}
	var v []byte
	if err := q.QueryRow(ctx, `SELECT value FROM backstop_secrets WHERE name = $1`, name).Scan(&v); err != nil {
		return nil, fmt.Errorf("%s: secret %s: %w", d.Prefix, name, err)
	}
	return v, nil
}
