package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/backstophq/backstop/store/sqlitestore"
	"github.com/backstophq/backstop/store/storetest"
)

// BenchmarkRedrive: go test -run '^$' -bench Redrive -benchtime 100000x ./store/sqlitestore/
func BenchmarkRedrive(b *testing.B) {
	s, err := sqlitestore.Open(filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	storetest.BenchRedrive(b, s)
}

// BenchmarkGauges: go test -run '^$' -bench Gauges -benchtime 20x ./store/sqlitestore/
func BenchmarkGauges(b *testing.B) {
	s, err := sqlitestore.Open(filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	storetest.BenchGauges(b, s)
}
