package pgstore

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// A copied batch is sent in COPY's binary format, written here column by
// column from the rows, instead of as a row of Go values per task that
// pgx boxes and encodes one value at a time through its type map: for a
// batch of 1,000 tasks that is 25,000 boxed values and as many plan
// look-ups, which cost the client about as much CPU as the COPY costs the
// server (docs/benchmarks.md, "Postgres batch enqueue against COPY: where
// the time goes"). The values are those row.args gives the INSERT, in the
// same columns (copyColumns), encoded as the server's binary receive
// functions read them: text as its bytes, json as its text, jsonb as
// version 1 and its text, int4/int8/float8/bool in network order,
// timestamptz as microseconds since 2000-01-01 (truncated, as pgx does),
// NULL as length -1.

// sqlCopyTasks is the COPY a batch's rows are sent with.
var sqlCopyTasks = "COPY backstop_tasks (" + strings.Join(copyColumns, ", ") + ") FROM STDIN (FORMAT binary)"

// copyHeader starts a binary COPY stream: its signature, no flags, no
// header extension.
const copyHeader = "PGCOPY\n\xff\r\n\x00" + "\x00\x00\x00\x00" + "\x00\x00\x00\x00"

// copyTrailer ends a binary COPY stream (a field count of -1).
const copyTrailer = "\xff\xff"

// usecY2K is 2000-01-01 UTC in microseconds since the Unix epoch: the
// zero of PostgreSQL's timestamps.
const usecY2K = 946_684_800_000_000

// copyRows appends to buf the binary COPY stream of batch, whose rows
// all list the event seq in event_links.
func copyRows(buf []byte, batch []row, seq int64) ([]byte, error) {
	if need := copySize(batch); cap(buf)-len(buf) < need {
		buf = slices.Grow(buf, need)
	}
	buf = append(buf, copyHeader...)
	var err error
	for _, r := range batch {
		if buf, err = r.appendCopy(buf, seq); err != nil {
			return nil, err
		}
	}
	return append(buf, copyTrailer...), nil
}

// copyRowFixed is the bytes of a copied row but its variable-length
// values (a deadline counted as set).
const copyRowFixed = 2 + // the field count
	25*4 + // each field's length
	6*4 + 1 + 5*8 + 8 + // the int4s, the bool, the int8s and times, the float8
	20 + 4 + 8 // event_links: the array's header, its element's length and value

// copySize is the length of batch's COPY stream, or a little more.
func copySize(batch []row) int {
	n := len(copyHeader) + len(copyTrailer)
	for _, r := range batch {
		t := r.task
		n += copyRowFixed + len(t.ID) + len(t.Queue) + len(t.Kind) + len(t.State) + len(r.inline) + len(r.attributes) + 1 +
			len(r.retry) + 1 + len(t.IdempotencyKey) + len(t.MergeKey) + len(t.TraceParent) + len(t.ReplayedFrom)
	}
	return n
}

// copyBuffers keeps the buffers of copied batches' streams for the next
// batch: a batch of 1,000 is a few hundred kilobytes, written anew by
// every copied enqueue. A buffer goes back only after a COPY that
// succeeded (pgconn's reader of the stream is then done with it), and
// only up to maxPooledCopy.
var copyBuffers sync.Pool

const maxPooledCopy = 4 << 20

func getCopyBuffer() []byte {
	if b, ok := copyBuffers.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return nil
}

func putCopyBuffer(b []byte) {
	if cap(b) <= maxPooledCopy {
		copyBuffers.Put(&b)
	}
}

// appendCopy appends the row's fields in copyColumns order (row.args's
// values, then event_links = {seq}).
func (r row) appendCopy(buf []byte, seq int64) ([]byte, error) {
	t := r.task
	buf = binary.BigEndian.AppendUint16(buf, uint16(len(copyColumns)))
	buf = copyText(buf, t.ID)
	buf = copyText(buf, t.Queue)
	buf = copyText(buf, t.Kind)
	buf = copyText(buf, string(t.State))
	for _, v := range [...]struct {
		col string
		n   int
	}{{"priority", t.Priority}, {"attempt", t.Attempt}, {"max_attempts", t.MaxAttempts}} {
		if v.n < math.MinInt32 || v.n > math.MaxInt32 {
			return nil, fmt.Errorf("task %s: %s %d is out of range for an int4", t.ID, v.col, v.n)
		}
		buf = copyInt4(buf, v.n)
	}
	buf = copyJSON(buf, r.inline)
	if len(t.Payload) > math.MaxInt32 {
		return nil, fmt.Errorf("task %s: payload_size %d is out of range for an int4", t.ID, len(t.Payload))
	}
	buf = copyInt4(buf, len(t.Payload))
	buf = binary.BigEndian.AppendUint32(buf, 1)
	buf = append(buf, b2i(r.spilled))
	buf = copyJSONB(buf, r.attributes)
	buf = copyTime(buf, t.RunAt)
	buf = copyTime(buf, t.CreatedAt)
	buf = copyTime(buf, t.UpdatedAt)
	buf = copyInt8(buf, time.Duration(t.Timeout).Microseconds())
	if t.Deadline == nil {
		buf = copyNull(buf)
	} else {
		buf = copyTime(buf, *t.Deadline)
	}
	buf = copyJSONB(buf, r.retry)
	buf = copyNullText(buf, t.IdempotencyKey)
	buf = copyNullText(buf, t.MergeKey)
	for _, v := range [...]struct {
		col string
		n   int
	}{{"progress_total", t.Progress.Total}, {"progress_completed", t.Progress.Completed}} {
		if v.n < math.MinInt32 || v.n > math.MaxInt32 {
			return nil, fmt.Errorf("task %s: %s %d is out of range for an int4", t.ID, v.col, v.n)
		}
		buf = copyInt4(buf, v.n)
	}
	buf = binary.BigEndian.AppendUint32(buf, 8)
	buf = binary.BigEndian.AppendUint64(buf, math.Float64bits(t.Complexity))
	buf = copyNullText(buf, t.TraceParent)
	buf = copyNullText(buf, t.ReplayedFrom)
	return copyLinks(buf, seq), nil
}

func b2i(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func copyNull(buf []byte) []byte { return binary.BigEndian.AppendUint32(buf, math.MaxUint32) } // -1

func copyText(buf []byte, s string) []byte {
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(s)))
	return append(buf, s...)
}

// copyNullText is s, or NULL for "" (nullString).
func copyNullText(buf []byte, s string) []byte {
	if s == "" {
		return copyNull(buf)
	}
	return copyText(buf, s)
}

// copyJSON is a json column: its text, or NULL for nil (nullJSON).
func copyJSON(buf []byte, b []byte) []byte {
	if b == nil {
		return copyNull(buf)
	}
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(b)))
	return append(buf, b...)
}

// copyJSONB is a jsonb column: version 1, then its text; NULL for nil.
func copyJSONB(buf []byte, b []byte) []byte {
	if b == nil {
		return copyNull(buf)
	}
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(b)+1))
	buf = append(buf, 1)
	return append(buf, b...)
}

func copyInt4(buf []byte, n int) []byte {
	buf = binary.BigEndian.AppendUint32(buf, 4)
	return binary.BigEndian.AppendUint32(buf, uint32(int32(n)))
}

func copyInt8(buf []byte, n int64) []byte {
	buf = binary.BigEndian.AppendUint32(buf, 8)
	return binary.BigEndian.AppendUint64(buf, uint64(n))
}

// copyTime is a timestamptz: microseconds since 2000-01-01 UTC, the
// nanoseconds truncated.
func copyTime(buf []byte, t time.Time) []byte {
	return copyInt8(buf, t.Unix()*1_000_000+int64(t.Nanosecond())/1000-usecY2K)
}

// int8OID is the type of event_links' elements.
const int8OID = 20

// copyLinks is event_links: the one-dimensional int8 array {seq}.
func copyLinks(buf []byte, seq int64) []byte {
	buf = binary.BigEndian.AppendUint32(buf, 20+4+8) // header, then one element
	buf = binary.BigEndian.AppendUint32(buf, 1)      // dimensions
	buf = binary.BigEndian.AppendUint32(buf, 0)      // no NULLs
	buf = binary.BigEndian.AppendUint32(buf, int8OID)
	buf = binary.BigEndian.AppendUint32(buf, 1) // length of the dimension
	buf = binary.BigEndian.AppendUint32(buf, 1) // its lower bound
	return copyInt8(buf, seq)
}
