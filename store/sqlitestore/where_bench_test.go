package sqlitestore_test

import (
	"testing"

	"github.com/backstophq/backstop/store/storetest"
)

// BenchmarkWhere: go test -run '^$' -bench Where -benchtime 5x ./store/sqlitestore/
func BenchmarkWhere(b *testing.B) {
	storetest.BenchWhere(b, benchStore(b))
}

// BenchmarkDLQByPayload counts dead letters by group and redrives them by
// a payload field, SQL path and Go path:
//
//	go test -run '^$' -bench DLQByPayload -benchtime 3x ./store/sqlitestore/
func BenchmarkDLQByPayload(b *testing.B) {
	storetest.BenchDLQByPayload(b, benchStore(b))
}
