package pgstore

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// A claim reads every column of up to thousands of rows a second. pgx's
// Scan finds each column's scan plan and calls it through an interface,
// and hands times over in the local zone, which scanTask then converts;
// decodeRaw reads the row's wire values into the same destinations
// directly instead. It takes only the layout it knows (rawLayout: each
// column of the type and wire format its destination expects); any other
// goes through Scan, so the two read the same rows the same way
// (TestDecodeRawMatchesScan).

// rawLayout reports whether decodeRaw reads rows of fds into sc's
// destinations; checked once per field description slice, which also
// notes how each column is decoded (sc.kinds).
func (sc *taskScan) rawLayout(fds []pgconn.FieldDescription) bool {
	if len(fds) != len(sc.dest) {
		return false
	}
	if sc.layout == &fds[0] {
		return true
	}
	for i := range fds {
		k := rawKind(sc.dest[i], fds[i].DataTypeOID, fds[i].Format)
		if k == rawNone {
			return false
		}
		sc.kinds[i] = k
	}
	sc.layout = &fds[0]
	return true
}

// How decodeRaw reads a column.
const (
	rawNone      uint8 = iota // not decodable: Scan reads the row
	rawText                   // textDest: text in either format
	rawBytesText              // bytesDest: text in either format
	rawInt4                   // *int from a binary int4
	rawInt8                   // *int64 from a binary int8
	rawBool                   // *bool from a binary bool
	rawFloat8                 // *float64 from a binary float8
	rawTime                   // *time.Time from a binary timestamptz, never NULL or infinite
	rawTimeNull               // *pgtype.Timestamptz from a binary timestamptz
	rawCopy                   // *[]byte: json, jsonb as text, bytea as binary: the bytes copied
	rawJSONB                  // *[]byte from a binary jsonb: the version byte dropped
)

// rawKind is how decodeRaw reads a value of type oid in format into dest.
func rawKind(dest any, oid uint32, format int16) uint8 {
	bin := format == pgtype.BinaryFormatCode
	switch dest.(type) {
	case textDest:
		if oid == pgtype.TextOID { // the same bytes in either format
			return rawText
		}
	case bytesDest:
		if oid == pgtype.TextOID {
			return rawBytesText
		}
	case *int:
		if bin && oid == pgtype.Int4OID {
			return rawInt4
		}
	case *int64:
		if bin && oid == pgtype.Int8OID {
			return rawInt8
		}
	case *bool:
		if bin && oid == pgtype.BoolOID {
			return rawBool
		}
	case *float64:
		if bin && oid == pgtype.Float8OID {
			return rawFloat8
		}
	case *time.Time:
		if bin && oid == pgtype.TimestamptzOID {
			return rawTime
		}
	case *pgtype.Timestamptz:
		if bin && oid == pgtype.TimestamptzOID {
			return rawTimeNull
		}
	case *[]byte:
		switch {
		case oid == pgtype.JSONBOID && bin:
			return rawJSONB
		case oid == pgtype.JSONOID || oid == pgtype.JSONBOID || (bin && oid == pgtype.ByteaOID):
			return rawCopy
		}
	}
	return rawNone
}

// decodeRaw reads one row's wire values (rawLayout accepted its fields)
// into sc's destinations, as Scan would: text NULL as "", JSON and bytea
// copied (NULL: nil), times in UTC. A NULL where the destination has no
// NULL (an int, a time.Time) is an error, as it is for Scan.
func (sc *taskScan) decodeRaw(fds []pgconn.FieldDescription, vals [][]byte) error {
	if len(vals) != len(sc.dest) {
		return fmt.Errorf("pgstore: task row has %d columns, want %d", len(vals), len(sc.dest))
	}
	for i, v := range vals {
		if err := decodeRawValue(sc.kinds[i], sc.dest[i], v); err != nil {
			return fmt.Errorf("pgstore: column %d (%s): %w", i, fds[i].Name, err)
		}
	}
	return nil
}

// rawSizes is the wire size of each fixed-size kind.
var rawSizes = [...]int{rawInt4: 4, rawInt8: 8, rawBool: 1, rawFloat8: 8, rawTime: 8, rawTimeNull: 8}

func decodeRawValue(kind uint8, dest any, v []byte) error {
	switch kind {
	case rawText:
		return dest.(textDest).ScanBytes(v)
	case rawBytesText:
		return dest.(bytesDest).ScanBytes(v)
	case rawCopy, rawJSONB:
		d := dest.(*[]byte)
		switch {
		case v == nil:
			*d = nil
		case kind == rawJSONB:
			if len(v) == 0 || v[0] != 1 {
				return fmt.Errorf("unknown jsonb version")
			}
			*d = append([]byte(nil), v[1:]...)
		default:
			*d = append([]byte(nil), v...)
		}
		return nil
	}
	if v == nil {
		if kind == rawTimeNull {
			*dest.(*pgtype.Timestamptz) = pgtype.Timestamptz{}
			return nil
		}
		return fmt.Errorf("NULL where a value is required")
	}
	if int(kind) < len(rawSizes) && len(v) != rawSizes[kind] {
		return fmt.Errorf("a value of %d bytes, want %d", len(v), rawSizes[kind])
	}
	switch kind {
	case rawInt4:
		*dest.(*int) = int(int32(binary.BigEndian.Uint32(v)))
	case rawInt8:
		*dest.(*int64) = int64(binary.BigEndian.Uint64(v))
	case rawBool:
		*dest.(*bool) = v[0] == 1
	case rawFloat8:
		*dest.(*float64) = math.Float64frombits(binary.BigEndian.Uint64(v))
	case rawTime:
		ts := rawTimestamptz(v)
		if ts.InfinityModifier != pgtype.Finite {
			return fmt.Errorf("cannot scan %s into a time", ts.InfinityModifier)
		}
		*dest.(*time.Time) = ts.Time
	case rawTimeNull:
		*dest.(*pgtype.Timestamptz) = rawTimestamptz(v)
	}
	return nil
}

// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01 UTC).
const microsecFromUnixEpochToY2K = 946684800 * 1_000_000

// rawTimestamptz decodes a binary timestamptz (8 bytes), in UTC.
func rawTimestamptz(v []byte) pgtype.Timestamptz {
	us := int64(binary.BigEndian.Uint64(v))
	switch us {
	case math.MaxInt64:
		return pgtype.Timestamptz{Valid: true, InfinityModifier: pgtype.Infinity}
	case math.MinInt64:
		return pgtype.Timestamptz{Valid: true, InfinityModifier: pgtype.NegativeInfinity}
	}
	t := time.Unix(microsecFromUnixEpochToY2K/1_000_000+us/1_000_000,
		(microsecFromUnixEpochToY2K%1_000_000*1_000)+(us%1_000_000*1_000)).UTC()
	return pgtype.Timestamptz{Time: t, Valid: true}
}
