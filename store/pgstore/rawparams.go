package pgstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A copied batch's event row (sqlCopiedEvents) takes arrays of a
// thousand elements; pgx's batch encodes each element through its type
// map (an interface call, a plan check and a length patch an element) into
// a parameter buffer it grows and drops on every batch, then copies into
// the Bind message: about half a millisecond of client CPU and 700 KB of
// garbage a batch of 1,000 (docs/benchmarks.md, branch enqclient). The
// first round trip of Store.Enqueue's copied batch (BEGIN, the event row,
// the wake-up) is sent instead through pgconn's pipeline, its parameters
// written here in the binary format for the types the statement's
// description names. Anything else (another argument type, a parameter of
// another type, a connection that does not prepare statements) goes
// through pgx's batch as before.

// Type OIDs of the parameters rawParams encodes.
const (
	oidText           = 25
	oidJSON           = 114
	oidTimestamptz    = 1184
	oidTextArray      = 1009
	oidInt8Array      = 1016
	oidTimestamptzArr = 1185
	oidInt8           = 20
)

// rawParams appends args to buf in the binary format, each as the
// parameter type oids gives it, and returns the values (slices of the
// returned buffer; nil for NULL). ok is false when an argument is not one
// it encodes as its parameter's type.
func rawParams(buf []byte, oids []uint32, args []any) (out []byte, values [][]byte, ok bool) {
	if len(oids) != len(args) {
		return buf, nil, false
	}
	ends := make([]int, len(args)) // -1: NULL
	for i, a := range args {
		switch v := a.(type) {
		case time.Time:
			if oids[i] != oidTimestamptz {
				return buf, nil, false
			}
			buf = binary.BigEndian.AppendUint64(buf, uint64(pgMicros(v)))
		case eventTimes:
			if oids[i] != oidTimestamptzArr {
				return buf, nil, false
			}
			buf = arrayHeader(buf, oidTimestamptz, len(v))
			for _, r := range v {
				buf = copyInt8(buf, pgMicros(r.task.CreatedAt))
			}
		case eventTexts:
			if oids[i] != oidTextArray {
				return buf, nil, false
			}
			buf = arrayHeader(buf, oidText, len(v.batch))
			for _, r := range v.batch {
				buf = copyText(buf, *v.field(r.task))
			}
		case []string:
			if oids[i] != oidTextArray || v == nil {
				return buf, nil, false
			}
			buf = arrayHeader(buf, oidText, len(v))
			for _, s := range v {
				buf = copyText(buf, s)
			}
		case []int64:
			if oids[i] != oidInt8Array || v == nil {
				return buf, nil, false
			}
			buf = arrayHeader(buf, oidInt8, len(v))
			for _, n := range v {
				buf = copyInt8(buf, n)
			}
		case []byte: // json's binary format is its text
			if oids[i] != oidJSON {
				return buf, nil, false
			}
			if v == nil {
				ends[i] = -1
				continue
			}
			buf = append(buf, v...)
		case string:
			if oids[i] != oidText {
				return buf, nil, false
			}
			buf = append(buf, v...)
		default:
			return buf, nil, false
		}
		ends[i] = len(buf)
	}
	values = make([][]byte, len(args))
	start := 0
	for i, end := range ends {
		if end < 0 {
			continue
		}
		values[i] = buf[start:end:end]
		start = end
	}
	return buf, values, true
}

// arrayHeader starts a one-dimensional array of n elements of type elem,
// without NULLs, its lower bound 1.
func arrayHeader(buf []byte, elem uint32, n int) []byte {
	buf = binary.BigEndian.AppendUint32(buf, 1) // dimensions
	buf = binary.BigEndian.AppendUint32(buf, 0) // no NULLs
	buf = binary.BigEndian.AppendUint32(buf, elem)
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	return binary.BigEndian.AppendUint32(buf, 1)
}

// pgMicros is t as a timestamptz: microseconds since 2000-01-01 UTC, the
// nanoseconds truncated (as pgx and copyTime write it).
func pgMicros(t time.Time) int64 {
	return t.Unix()*1_000_000 + int64(t.Nanosecond())/1000 - usecY2K
}

// binaryFormat: every parameter, and the results, in the binary format.
var binaryFormat = []int16{pgx.BinaryFormatCode}

// firstRaw is firstWaking through pgconn's pipeline: BEGIN, sql with args
// (encoded by rawParams) and the wake-up of queues, in one round trip,
// reported to the connection's tracer as pgx reports a batch. sent is
// false, and nothing was sent, when the transaction is begun or holds
// writes, the connection does not keep statements prepared, or an
// argument is not one rawParams encodes; the caller then uses pgx's batch.
// sql's result is one int8, read into dest.
func (t *pipeTx) firstRaw(ctx context.Context, queues []string, dest *int64, sql string, args []any) (sent bool, err error) {
	if t.begun || t.held != nil || t.done || t.conn.Config().DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		return false, nil
	}
	sd, err := t.conn.Prepare(ctx, sql, sql) // once a connection; pgx keeps it
	if err != nil {
		return true, err
	}
	if len(sd.Fields) != 1 || sd.Fields[0].DataTypeOID != oidInt8 {
		return false, nil
	}
	buf, values, ok := rawParams(getCopyBuffer(), sd.ParamOIDs, args)
	if !ok {
		return false, nil
	}
	defer putCopyBuffer(buf) // the Bind message holds a copy once sent
	var notify *pgconn.StatementDescription
	var notifyArg []byte
	if len(queues) > 0 {
		if notify, err = t.conn.Prepare(ctx, sqlNotifyQueues, sqlNotifyQueues); err != nil {
			return true, err
		}
		notifyArg = arrayHeader(nil, oidText, len(queues))
		for _, q := range queues {
			notifyArg = copyText(notifyArg, q)
		}
	}

	tr, _ := t.conn.Config().Tracer.(pgx.BatchTracer)
	var b *pgx.Batch
	if tr != nil {
		b = &pgx.Batch{}
		b.Queue("begin")
		b.Queue(sql, args...)
		if notify != nil {
			b.Queue(sqlNotifyQueues, queues)
		}
		ctx = tr.TraceBatchStart(ctx, t.conn, pgx.TraceBatchStartData{Batch: b})
	}
	t.begun = true
	err = t.sendRaw(ctx, tr, b, sd, values, notify, notifyArg, dest)
	if tr != nil {
		tr.TraceBatchEnd(ctx, t.conn, pgx.TraceBatchEndData{Err: err})
	}
	if err == nil {
		t.waking = queues
	}
	return true, err
}

// sendRaw sends firstRaw's pipeline and reads its results: the first
// error, the rest drained to the pipeline's end.
func (t *pipeTx) sendRaw(ctx context.Context, tr pgx.BatchTracer, b *pgx.Batch, sd *pgconn.StatementDescription, values [][]byte,
	notify *pgconn.StatementDescription, notifyArg []byte, dest *int64) error {
	pl := t.conn.PgConn().StartPipeline(ctx)
	pl.SendQueryParams("begin", nil, nil, nil, nil)
	pl.SendQueryStatement(sd, values, binaryFormat, binaryFormat)
	if notify != nil {
		pl.SendQueryStatement(notify, [][]byte{notifyArg}, binaryFormat, binaryFormat)
	}
	if err := pl.Sync(); err != nil {
		return errors.Join(err, pl.Close())
	}
	var first error
	for i := 0; ; i++ {
		res, err := pl.GetResults()
		if err != nil {
			first = err
			break
		}
		rr, ok := res.(*pgconn.ResultReader)
		if !ok { // the pipeline's end (*PipelineSync), or nothing more
			break
		}
		r := rr.Read()
		if tr != nil {
			q := b.QueuedQueries[i]
			tr.TraceBatchQuery(ctx, t.conn, pgx.TraceBatchQueryData{SQL: q.SQL, Args: q.Arguments, CommandTag: r.CommandTag, Err: r.Err})
		}
		if r.Err != nil {
			first = r.Err
			break
		}
		if i == 1 {
			if len(r.Rows) != 1 || len(r.Rows[0]) != 1 || len(r.Rows[0][0]) != 8 {
				first = fmt.Errorf("pgstore: the event row's statement returned %d rows, want one int8", len(r.Rows))
				break
			}
			*dest = int64(binary.BigEndian.Uint64(r.Rows[0][0]))
		}
	}
	if err := pl.Close(); first == nil {
		first = err
	}
	return first
}
