package pgstore_test

import (
	"context"
	"testing"

	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store/pgstore"
	"github.com/backstophq/backstop/store/storetest"
)

// BenchmarkRedrive measures an unthrottled bulk redrive; it reports dead
// letters per second:
//
//	BACKSTOP_PG_DURABLE=1 scripts/with-postgres go test -run '^$' -bench Redrive -benchtime 100000x -benchmem ./store/pgstore/
func BenchmarkRedrive(b *testing.B) {
	ctx := context.Background()
	s, err := pgstore.Open(ctx, testdb.Postgres(b))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	storetest.BenchRedrive(b, s)
}

// BenchmarkGauges measures the store gauges' one query:
//
//	scripts/with-postgres go test -run '^$' -bench Gauges -benchtime 20x ./store/pgstore/
func BenchmarkGauges(b *testing.B) {
	ctx := context.Background()
	s, err := pgstore.Open(ctx, testdb.Postgres(b))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	storetest.BenchGauges(b, s)
}
