package sqldialect

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/backstophq/backstop/store"
)

// A fair queue's index holds its pending tasks by their value of its
// attribute, in claim order within a value: (value, priority DESC,
// run_at, id) WHERE state = 'pending' AND queue = the queue. With it a
// fair claim finds the waiting values one index probe each and reads the
// next tasks of a value without reading the others' (fairHeads,
// fairStreams). It is made when fairness is set and dropped when it is
// turned off or its attribute changes; without it (the role that set
// fairness may not create indexes) fair claims count the whole queue
// instead, with the same picks.

// fairIndexName names f's index after its queue and attribute.
func fairIndexName(f store.FairQueue) string {
	h := sha256.Sum256([]byte(f.Queue + "\x00" + f.By))
	return "backstop_fair_" + hex.EncodeToString(h[:8])
}

// sqlText is s as an SQL string literal.
func sqlText(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// fairValue is the value of attribute by of the task in table alias (or
// table) col, "" when it has none, with the key written out so that the
// expression is the index's.
func (p *Procedures) fairValue(by, col string) string {
	return "coalesce(" + p.dialect.JSONText(col+"attributes", sqlText(fmt.Sprint(p.dialect.JSONKey(by)))) + ", '')"
}

// createFairIndex makes f's index (it may already be there).
func (p *Procedures) createFairIndex(ctx context.Context, f store.FairQueue) error {
	name := fairIndexName(f)
	_, err := p.writer.Exec(ctx, `CREATE INDEX `+p.dialect.IndexConcurrently+`IF NOT EXISTS `+name+` ON backstop_tasks (`+
		p.fairValue(f.By, "")+`, priority DESC, run_at, id) WHERE state = 'pending' AND queue = `+sqlText(f.Queue))
	if err != nil {
		p.dropFairIndex(ctx, f) // a failed concurrent build leaves an invalid index
	}
	return err
}

// dropFairIndex drops f's index, if there.
func (p *Procedures) dropFairIndex(ctx context.Context, f store.FairQueue) {
	name := fairIndexName(f)
	_, _ = p.writer.Exec(context.WithoutCancel(ctx), `DROP INDEX `+p.dialect.IndexConcurrently+`IF EXISTS `+name)
	p.fairIdx.Delete(name)
}

// fairIndexSeen is when a claim last looked for a fair queue's index and
// whether it was there.
type fairIndexSeen struct {
	at    time.Time
	there bool
}

// fairIndexed reports whether f's index is there (valid), as q sees it,
// looked for again at most once a minute of the claims' clock once found
// (someone may drop it) and once a second while not (another process may
// make it).
func (p *Procedures) fairIndexed(ctx context.Context, q Querier, f store.FairQueue, now time.Time) bool {
	name := fairIndexName(f)
	if v, ok := p.fairIdx.Load(name); ok {
		s := v.(fairIndexSeen)
		fresh := time.Second
		if s.there {
			fresh = time.Minute
		}
		if !now.Before(s.at) && now.Sub(s.at) < fresh {
			return s.there
		}
	}
	var n int
	if err := q.QueryRow(ctx, p.dialect.IndexValid, name).Scan(&n); err != nil {
		return false
	}
	p.fairIdx.Store(name, fairIndexSeen{at: now, there: n > 0})
	return n > 0
}

// fairHeads lists the values with claimable tasks (w), each with the
// priority of its next one, in one index probe or two per value (a loose
// index scan: each step finds the next value after the last).
func fairHeads(ctx context.Context, q Querier, w fairFilter) ([]store.FairStream, error) {
	next := `(SELECT ` + w.value + ` FROM backstop_tasks t WHERE ` + w.where + ` AND ` + w.value + ` > h.v ORDER BY ` + w.value + ` LIMIT 1)`
	rows, err := q.Query(ctx, `WITH RECURSIVE h(v, p) AS (
	SELECT * FROM (SELECT `+w.value+`, t.priority FROM backstop_tasks t WHERE `+w.where+`
		ORDER BY `+w.value+`, t.priority DESC, t.run_at, t.id LIMIT 1) f
	UNION ALL
	SELECT `+next+`, (SELECT t.priority FROM backstop_tasks t WHERE `+w.where+` AND `+w.value+` = `+next+`
		ORDER BY t.priority DESC, t.run_at, t.id LIMIT 1)
	FROM h WHERE h.v IS NOT NULL
)
SELECT v, p FROM h WHERE v IS NOT NULL`, w.args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var heads []store.FairStream
	for rows.Next() {
		var s store.FairStream
		if err := rows.Scan(&s.Value, &s.Head); err != nil {
			return nil, err
		}
		heads = append(heads, s)
	}
	return heads, rows.Err()
}

// fairStreams reads, for each value of wants, its first wants[value]
// claimable tasks (w) in claim order into its stream, ranked within their
// priority, and whether that is all of them (with kind and attributes,
// for the limits' admission, when limited); a hundred values a statement.
func fairStreams(ctx context.Context, q Querier, w fairFilter, streams []store.FairStream, wants map[string]int, limited bool) error {
	var values []int
	for i, s := range streams {
		if wants[s.Value] > 0 {
			values = append(values, i)
		}
	}
	for len(values) > 0 {
		chunk := values[:min(len(values), 100)]
		values = values[len(chunk):]
		args := append([]any{}, w.args...)
		parts := make([]string, len(chunk))
		for k, i := range chunk {
			args = append(args, streams[i].Value)
			parts[k] = fmt.Sprintf(`SELECT * FROM (SELECT t.id, t.priority, %s AS v, t.kind, t.attributes FROM backstop_tasks t
	WHERE %s AND %s = $%d ORDER BY t.priority DESC, t.run_at, t.id LIMIT %d) s%d`, w.value, w.where, w.value, len(args), wants[streams[i].Value], k)
			streams[i].Tasks = streams[i].Tasks[:0]
		}
		byValue := map[string]int{}
		for _, i := range chunk {
			byValue[streams[i].Value] = i
		}
		rs, err := q.Query(ctx, strings.Join(parts, "\nUNION ALL\n"), args...)
		if err != nil {
			return err
		}
		err = func() error {
			defer rs.Close()
			for rs.Next() {
				var (
					c     store.FairCandidate
					attrs []byte
				)
				if err := rs.Scan(&c.ID, &c.Priority, &c.Value, &c.Kind, &attrs); err != nil {
					return err
				}
				if limited && len(attrs) > 0 {
					if err := json.Unmarshal(attrs, &c.Attrs); err != nil {
						return fmt.Errorf("task %s: attributes: %w", c.ID, err)
					}
				}
				s := &streams[byValue[c.Value]]
				c.Rank = 1
				if n := len(s.Tasks); n > 0 && s.Tasks[n-1].Priority == c.Priority {
					c.Rank = s.Tasks[n-1].Rank + 1
				}
				s.Tasks = append(s.Tasks, c)
			}
			return rs.Err()
		}()
		if err != nil {
			return err
		}
		for _, i := range chunk {
			streams[i].All = len(streams[i].Tasks) < wants[streams[i].Value]
		}
	}
	return nil
}

// fairRead reads, from the fair index, the tasks that hold a claim of max
// in the queue's fair order (store.FairWants): the values' next tasks as
// far as the order reaches, usually in one statement.
func fairRead(ctx context.Context, q Querier, w fairFilter, f store.FairQueue, streams []store.FairStream,
	passes map[string]float64, base float64, max int, limited bool) ([]store.FairCandidate, error) {
	for {
		wants := store.FairWants(f, streams, passes, base, max)
		if len(wants) == 0 {
			break
		}
		if err := fairStreams(ctx, q, w, streams, wants, limited); err != nil {
			return nil, err
		}
	}
	var cands []store.FairCandidate
	for _, s := range streams {
		cands = append(cands, s.Tasks...)
	}
	return cands, nil
}
