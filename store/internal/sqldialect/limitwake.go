package sqldialect

import (
	"context"
	"fmt"
	"time"

	"github.com/backstophq/backstop/store"
)

// NextToken implements store.Limits: it reads the stored buckets of the
// queue's rate limits (a budget without one is full).
func (p *Procedures) NextToken(ctx context.Context, queue string, now time.Time) (time.Time, error) {
	rows, err := p.reader.Query(ctx, `SELECT l.rate, l.burst, b.tokens, b.updated_at
FROM backstop_limits l JOIN backstop_limit_buckets b ON b.limit_name = l.name
WHERE l.queue = $1 AND l.rate > 0`, queue)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: next token: %w", p.dialect.Prefix, err)
	}
	defer rows.Close()
	var next time.Time
	for rows.Next() {
		var (
			l store.Limit
			b store.Bucket
		)
		if err := rows.Scan(&l.Rate, &l.Burst, &b.Tokens, &b.At); err != nil {
			return time.Time{}, fmt.Errorf("%s: next token: %w", p.dialect.Prefix, err)
		}
		tokens := l.Tokens(b, true, now)
		if store.WholeToken(tokens) {
			continue
		}
		if due := store.TokenDue(tokens, l.Rate, now); next.IsZero() || due.Before(next) {
			next = due
		}
	}
	if err := rows.Err(); err != nil {
		return time.Time{}, fmt.Errorf("%s: next token: %w", p.dialect.Prefix, err)
	}
	return next, nil
}
