package pgstore

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Array parameters that pgx encodes without an allocation per element.
//
// pgx encodes a []string or []time.Time parameter through
// pgtype.FlatArray, whose Index boxes each element into an interface (one
// allocation per string, two per time: the time and its wrapper). The
// batch statements (settle, heartbeat) send thousands of elements a
// second, so these types hand pgx a pointer to each element instead (a
// pointer goes into an interface as it is), whose methods give the value
// to the element's codec. The bytes sent are the same.

// textArray is a text[] parameter.
type textArray []string

// textElem is one element of a textArray.
type textElem string

func (e *textElem) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*e), Valid: true}, nil
}

func (a textArray) Dimensions() []pgtype.ArrayDimension { return arrayDims(a == nil, len(a)) }
func (a textArray) Index(i int) any                     { return (*textElem)(&a[i]) }
func (a textArray) IndexType() any                      { return (*textElem)(nil) }

// timeArray is a timestamptz[] (or timestamp[]) parameter.
type timeArray []time.Time

// timeElem is one element of a timeArray.
type timeElem time.Time

func (e *timeElem) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: time.Time(*e), Valid: true}, nil
}

func (e *timeElem) TimestampValue() (pgtype.Timestamp, error) {
	return pgtype.Timestamp{Time: time.Time(*e), Valid: true}, nil
}

func (a timeArray) Dimensions() []pgtype.ArrayDimension { return arrayDims(a == nil, len(a)) }
func (a timeArray) Index(i int) any                     { return (*timeElem)(&a[i]) }
func (a timeArray) IndexType() any                      { return (*timeElem)(nil) }

// arrayDims are the dimensions of a one-dimensional array of n elements
// (nil for a NULL array).
func arrayDims(null bool, n int) []pgtype.ArrayDimension {
	if null {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(n), LowerBound: 1}}
}
