package pgstore_test

import (
	"testing"

	"github.com/backstophq/backstop/store/storetest"
)

// BenchmarkWhere lists by a payload field, SQL path and Go path:
//
//	scripts/with-postgres go test -run '^$' -bench Where -benchtime 5x ./store/pgstore/
func BenchmarkWhere(b *testing.B) {
	storetest.BenchWhere(b, benchStore(b))
}

// BenchmarkDLQByPayload counts dead letters by group and redrives them by
// a payload field, SQL path and Go path:
//
//	scripts/with-postgres go test -run '^$' -bench DLQByPayload -benchtime 3x ./store/pgstore/
func BenchmarkDLQByPayload(b *testing.B) {
	storetest.BenchDLQByPayload(b, benchStore(b))
}
