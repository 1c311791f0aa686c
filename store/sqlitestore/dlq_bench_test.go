package sqlitestore_test

import (
	"testing"

	"github.com/backstophq/backstop/store/storetest"
)

// BenchmarkRedrive: go test -run '^$' -bench Redrive -benchtime 100000x ./store/sqlitestore/
func BenchmarkRedrive(b *testing.B) {
	storetest.BenchRedrive(b, benchStore(b))
}

// BenchmarkGauges: go test -run '^$' -bench Gauges -benchtime 20x ./store/sqlitestore/
func BenchmarkGauges(b *testing.B) {
	storetest.BenchGauges(b, benchStore(b))
}
