package sqldialect

import (
	"context"
	"fmt"
	"time"
)

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
