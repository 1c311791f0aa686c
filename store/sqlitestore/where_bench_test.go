package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/backstophq/backstop/store/sqlitestore"
	"github.com/backstophq/backstop/store/storetest"
)

// BenchmarkWhere: go test -run '^$' -bench Where -benchtime 5x ./store/sqlitestore/
func BenchmarkWhere(b *testing.B) {
	s, err := sqlitestore.Open(filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	storetest.BenchWhere(b, s)
}

// BenchmarkDLQByPayload counts dead letters by group and redrives them by
// a payload field, SQL path and Go path:
//
//	go test -run '^$' -bench DLQByPayload -benchtime 3x ./store/sqlitestore/
func BenchmarkDLQByPayload(b *testing.B) {
	s, err := sqlitestore.Open(filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	storetest.BenchDLQByPayload(b, s)
}
