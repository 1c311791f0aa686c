package sqldialect

import (
	"context"
	"fmt"
	"time"

	"github.com/backstophq/backstop/store"
)

// NextToken implements store.Limits: it reads the stored buckets of the
// queue's rate limits (a budget without one is full), each at at or, when
// it was stored later, at its own time.
func (p *Procedures) NextToken(ctx context.Context, queue string, at time.Time) (time.Time, error) {
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
		ref := at
		if b.At.After(ref) {
			ref = b.At
		}
		tokens := l.Tokens(b, true, ref)
		if store.WholeToken(tokens) {
			continue
		}
		if due := store.TokenDue(tokens, l.Rate, ref); next.IsZero() || due.Before(next) {
			next = due
		}
	}
	if err := rows.Err(); err != nil {
		return time.Time{}, fmt.Errorf("%s: next token: %w", p.dialect.Prefix, err)
	}
	return next, nil
}
