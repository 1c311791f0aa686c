package sqldialect

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
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

// EnsureFairIndexes makes the index of every fair queue that has none (a
// queue made fair by a role that may not create indexes, or before fair
// indexes existed): migrate runs it as the schema's owner.
func (p *Procedures) EnsureFairIndexes(ctx context.Context) error {
	fs, err := p.ListFair(ctx)
	if err != nil {
		return err
	}
	for _, f := range fs {
		if err := p.createFairIndex(ctx, f); err != nil {
			return fmt.Errorf("%s: the fair index of queue %s: %w", p.dialect.Prefix, f.Queue, err)
		}
		p.fairIdx.Delete(fairIndexName(f))
	}
	return nil
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
// priority of its next one: a loose index scan, where each step finds the
// next value after the last in the fair index (one probe a value with a
// LATERAL join, two without).
func (p *Procedures) fairHeads(ctx context.Context, q Querier, w fairFilter) ([]store.FairStream, error) {
	first := `SELECT ` + w.value + ` AS v, t.priority AS p FROM ` + w.indexed + ` WHERE ` + w.where
	order := ` ORDER BY ` + w.value + `, t.priority DESC, t.run_at, t.id LIMIT 1`
	step := `SELECT n.v, n.p FROM h, LATERAL (` + first + ` AND ` + w.value + ` > h.v` + order + `) n`
	if !p.dialect.Lateral {
		next := `(SELECT ` + w.value + ` FROM ` + w.indexed + ` WHERE ` + w.where + ` AND ` + w.value + ` > h.v ORDER BY ` + w.value + ` LIMIT 1)`
		step = `SELECT ` + next + `, (SELECT t.priority FROM ` + w.indexed + ` WHERE ` + w.where + ` AND ` + w.value + ` = ` + next + `
		ORDER BY t.priority DESC, t.run_at, t.id LIMIT 1)
	FROM h WHERE h.v IS NOT NULL`
	}
	rows, err := q.Query(ctx, `WITH RECURSIVE h(v, p) AS (
	SELECT * FROM (`+first+order+`) f
	UNION ALL
	`+step+`
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
// for the limits' admission, when limited): one statement joining each
// value LATERAL, or one statement a value.
func (p *Procedures) fairStreams(ctx context.Context, q Querier, w fairFilter, streams []store.FairStream, wants map[string]int, limited bool) error {
	byValue := map[string]int{}
	var values []string
	var limits []int32
	for i, s := range streams {
		if n := wants[s.Value]; n > 0 {
			byValue[s.Value] = i
			values = append(values, s.Value)
			limits = append(limits, int32(n))
			streams[i].Tasks = streams[i].Tasks[:0]
		}
	}
	read := func(sql string, args ...any) error {
		rs, err := q.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
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
	}
	v, n := "$"+strconv.Itoa(len(w.args)+1), "$"+strconv.Itoa(len(w.args)+2)
	if p.dialect.Lateral {
		if err := read(`SELECT c.id, c.priority, c.v, c.kind, c.attributes
FROM (SELECT unnest(CAST(`+v+` AS text[])) AS v, unnest(CAST(`+n+` AS integer[])) AS n) s
CROSS JOIN LATERAL (SELECT t.id, t.priority, `+w.value+` AS v, t.kind, t.attributes FROM `+w.indexed+`
	WHERE `+w.where+` AND `+w.value+` = s.v ORDER BY t.priority DESC, t.run_at, t.id LIMIT s.n) c`,
			append(slices.Clone(w.args), p.dialect.TextList(values), limits)...); err != nil {
			return err
		}
	} else {
		one := `SELECT t.id, t.priority, ` + w.value + ` AS v, t.kind, t.attributes FROM ` + w.indexed + `
	WHERE ` + w.where + ` AND ` + w.value + ` = ` + v + ` ORDER BY t.priority DESC, t.run_at, t.id LIMIT ` + n
		for k, value := range values {
			if err := read(one, append(slices.Clone(w.args), value, limits[k])...); err != nil {
				return err
			}
		}
	}
	for _, value := range values {
		s := &streams[byValue[value]]
		s.All = len(s.Tasks) < wants[value]
	}
	return nil
}

// fairRead reads, from the fair index, the tasks that hold a claim of max
// in the queue's fair order (store.FairWants): the values' next tasks as
// far as the order reaches, usually in one statement.
func (p *Procedures) fairRead(ctx context.Context, q Querier, w fairFilter, f store.FairQueue, streams []store.FairStream,
	passes map[string]float64, base float64, max int, limited bool) ([]store.FairCandidate, error) {
	for {
		wants := store.FairWants(f, streams, passes, base, max)
		if len(wants) == 0 {
			break
		}
		if err := p.fairStreams(ctx, q, w, streams, wants, limited); err != nil {
			return nil, err
		}
	}
	var cands []store.FairCandidate
	for _, s := range streams {
		cands = append(cands, s.Tasks...)
	}
	return cands, nil
}
