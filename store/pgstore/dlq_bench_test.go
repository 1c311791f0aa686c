package pgstore_test

import (
	"testing"

	"github.com/backstophq/backstop/store/storetest"
)

// BenchmarkRedrive measures an unthrottled bulk redrive; it reports dead
// letters per second:
//
//	BACKSTOP_PG_DURABLE=1 scripts/with-postgres go test -run '^$' -bench Redrive -benchtime 100000x -benchmem ./store/pgstore/
func BenchmarkRedrive(b *testing.B) {
	storetest.BenchRedrive(b, benchStore(b))
}

// BenchmarkGauges measures the store gauges' one query:
//
//	scripts/with-postgres go test -run '^$' -bench Gauges -benchtime 20x ./store/pgstore/
func BenchmarkGauges(b *testing.B) {
	storetest.BenchGauges(b, benchStore(b))
}
