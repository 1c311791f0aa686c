package pgstore_test

import (
	"context"
	"testing"

	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store/pgstore"
	"github.com/backstophq/backstop/store/storetest"
)

// BenchmarkWhere lists by a payload field, SQL path and Go path:
//
//	scripts/with-postgres go test -run '^$' -bench Where -benchtime 5x ./store/pgstore/
func BenchmarkWhere(b *testing.B) {
	ctx := context.Background()
	s, err := pgstore.Open(ctx, testdb.Postgres(b))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	storetest.BenchWhere(b, s)
}

// BenchmarkDLQByPayload counts dead letters by group and redrives them by
// a payload field, SQL path and Go path:
//
//	scripts/with-postgres go test -run '^$' -bench DLQByPayload -benchtime 3x ./store/pgstore/
func BenchmarkDLQByPayload(b *testing.B) {
	ctx := context.Background()
	s, err := pgstore.Open(ctx, testdb.Postgres(b))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	storetest.BenchDLQByPayload(b, s)
}
