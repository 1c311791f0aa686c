package pgstore_test

import (
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store/pgstore"
)

// Retention's pick reads backstop_tasks_finished in its generic plan too
// (the state bound as a parameter proves no partial index by itself), so
// a prepared statement that settles on the generic plan never scans the
// history.
func TestRetentionPickGenericPlan(t *testing.T) {
	t.Parallel()
	s, err := pgstore.Open(t.Context(), testdb.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	plan, err := s.ExplainRetentionPickGeneric(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, "backstop_tasks_finished") || strings.Contains(plan, "Seq Scan") {
		t.Fatalf("retention's generic plan does not read backstop_tasks_finished:\n%s", plan)
	}
}
