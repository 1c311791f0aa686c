package sqldialect

import (
	"context"
	"fmt"

	"github.com/backstophq/backstop/store"
)

// This file reads store.Logs (the writes, batched each driver's way, stay
// in the drivers).

// ExecutionLogUsage implements store.Logs.
func (p *Procedures) ExecutionLogUsage(ctx context.Context, executionID string) (store.LogUsage, error) {
	d, q := p.dialect, p.reader
	var u store.LogUsage
	err := q.QueryRow(ctx, `SELECT count(*), COALESCE(sum(`+d.OctetLength("line")+`), 0), COALESCE(max(seq), 0)
		FROM backstop_execution_logs WHERE execution_id = $1`, executionID).Scan(&u.Lines, &u.Bytes, &u.LastSeq)
	if err != nil {
		return u, fmt.Errorf("%s: log usage: %w", d.Prefix, err)
	}
	return u, nil
}

// ReadLogs implements store.Logs.
func (p *Procedures) ReadLogs(ctx context.Context, taskID, executionID string, afterSeq, limit int) ([]store.LogLine, error) {
	d, q := p.dialect, p.reader
	rows, err := q.Query(ctx, `SELECT seq, at, stream, line FROM backstop_execution_logs
		WHERE execution_id = $1 AND task_id = $2 AND seq > $3 ORDER BY seq LIMIT $4`, executionID, taskID, afterSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: read logs: %w", d.Prefix, err)
	}
	defer rows.Close()
	out := []store.LogLine{}
	for rows.Next() {
		l := store.LogLine{TaskID: taskID, ExecutionID: executionID}
		if err := rows.Scan(&l.Seq, &l.At, &l.Stream, &l.Line); err != nil {
			return nil, fmt.Errorf("%s: read logs: %w", d.Prefix, err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: read logs: %w", d.Prefix, err)
	}
	return out, nil
}
