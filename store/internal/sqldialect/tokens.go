package sqldialect

import (
	"context"
	"errors"
	"fmt"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/store"
)

// This file is store.Tokens.

const tokenColumns = `id, name, role, hash, created_at, revoked_at, last_used_at`

func scanToken(row Row) (*store.Token, error) {
	var t store.Token
	if err := row.Scan(&t.ID, &t.Name, &t.Role, &t.Hash, &t.CreatedAt, &t.RevokedAt, &t.LastUsedAt); err != nil {
		return nil, err
	}
	return &t, nil
}

// CreateToken implements store.Tokens.
func (p *Procedures) CreateToken(ctx context.Context, t store.Token, ev bt.Event) error {
	d := p.dialect
	err := InTx(ctx, p.writer, func(tx Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO backstop_tokens (id, name, role, hash, created_at) VALUES ($1, $2, $3, $4, $5)`,
			t.ID, t.Name, t.Role, t.Hash, t.CreatedAt); err != nil {
			return err
		}
		return p.appendAudit(ctx, tx, ev)
	})
	if d.IsUnique(err) {
		return fmt.Errorf("%w: a live token named %q already exists", store.ErrConflict, t.Name)
	}
	if err != nil {
		return fmt.Errorf("%s: create token: %w", d.Prefix, err)
	}
	return nil
}

// appendAudit appends ev, an operator action's audit event, in tx (none
// when ev.Type is empty); an event the log refuses fails tx.
func (p *Procedures) appendAudit(ctx context.Context, tx Tx, ev bt.Event) error {
	if ev.Type == "" {
		return nil
	}
	evs := []bt.Event{ev}
	if err := store.CheckEvents(evs); err != nil {
		return err
	}
	return p.dialect.TaskEvents(ctx, tx, evs)
}

// TokenByHash implements store.Tokens.
func (p *Procedures) TokenByHash(ctx context.Context, hash []byte) (*store.Token, error) {
	d, q := p.dialect, p.reader
	t, err := scanToken(q.QueryRow(ctx, `SELECT `+tokenColumns+` FROM backstop_tokens WHERE hash = $1`, hash))
	if errors.Is(err, ErrNoRows) {
		return nil, fmt.Errorf("token: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: token by hash: %w", d.Prefix, err)
	}
	return t, nil
}

// ListTokens implements store.Tokens.
func (p *Procedures) ListTokens(ctx context.Context) ([]store.Token, error) {
	d, q := p.dialect, p.reader
	rows, err := q.Query(ctx, `SELECT `+tokenColumns+` FROM backstop_tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("%s: list tokens: %w", d.Prefix, err)
	}
	defer rows.Close()
	out := []store.Token{}
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: list tokens: %w", d.Prefix, err)
		}
		out = append(out, *t)
	}
	return out, rows.Err()
}

// RevokeToken implements store.Tokens.
func (p *Procedures) RevokeToken(ctx context.Context, idOrName string, now time.Time, audit func(store.Token) bt.Event) (*store.Token, error) {
	d, db := p.dialect, p.writer
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	t, err := scanToken(tx.QueryRow(ctx, `SELECT `+tokenColumns+` FROM backstop_tokens
		WHERE id = $1 OR (name = $1 AND revoked_at IS NULL) ORDER BY id = $1 DESC LIMIT 1`+d.ForUpdate, idOrName))
	if errors.Is(err, ErrNoRows) {
		return nil, fmt.Errorf("token %q: %w", idOrName, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: revoke token: %w", d.Prefix, err)
	}
	if t.RevokedAt != nil {
		return nil, fmt.Errorf("%w: token %q is already revoked", store.ErrConflict, idOrName)
	}
	if _, err := tx.Exec(ctx, `UPDATE backstop_tokens SET revoked_at = $1 WHERE id = $2`, now, t.ID); err != nil {
		return nil, fmt.Errorf("%s: revoke token: %w", d.Prefix, err)
	}
	n := now.UTC().Truncate(time.Microsecond)
	t.RevokedAt = &n
	if audit != nil {
		if err := p.appendAudit(ctx, tx, audit(*t)); err != nil {
			return nil, fmt.Errorf("%s: revoke token %s: %w", d.Prefix, t.ID, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("%s: revoke token: %w", d.Prefix, err)
	}
	return t, nil
}

// TouchToken implements store.Tokens.
func (p *Procedures) TouchToken(ctx context.Context, id string, now time.Time) error {
	d, q := p.dialect, p.writer
	if _, err := q.Exec(ctx, `UPDATE backstop_tokens SET last_used_at = $1 WHERE id = $2`, now, id); err != nil {
		return fmt.Errorf("%s: touch token: %w", d.Prefix, err)
	}
	return nil
}
