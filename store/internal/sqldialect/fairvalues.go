package sqldialect

import (
	"context"
	"fmt"
	"strconv"

	"github.com/backstophq/backstop/store"
)

// FairValues implements store.Fairness.
func (p *Procedures) FairValues(ctx context.Context, f store.FairQueue) ([]store.FairValue, error) {
	value := "coalesce(" + p.dialect.JSONText("t.attributes", "$1") + ", '')"
	rows, err := p.reader.Query(ctx, `SELECT `+value+` AS v, count(*) AS n FROM backstop_tasks t
WHERE t.state = 'pending' AND t.queue = $2
GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT `+strconv.Itoa(store.MaxFairValues), p.dialect.JSONKey(f.By), f.Queue)
	if err != nil {
		return nil, fmt.Errorf("%s: fair values: %w", p.dialect.Prefix, err)
	}
	defer rows.Close()
	out := []store.FairValue{}
	for rows.Next() {
		var v store.FairValue
		if err := rows.Scan(&v.Value, &v.Pending); err != nil {
			return nil, fmt.Errorf("%s: fair values: %w", p.dialect.Prefix, err)
		}
		v.Weight = f.Weight(v.Value)
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: fair values: %w", p.dialect.Prefix, err)
	}
	return out, nil
}
