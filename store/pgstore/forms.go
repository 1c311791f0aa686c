package pgstore

// The hot statements are written for the newest schema. A test may leave
// a store's schema at an older version (MigrateTo, MigrateDownTo), where a
// statement may need what a later migration adds (a sequence, a trigger
// that reads the count mark); such a statement records its form for each
// older schema (withOlderForms), and the store runs the form of the
// version it was left at (hot). A store the product opens is migrated
// first (Migrate) and runs the newest forms.

// olderForm is a statement's form on a schema older than below.
type olderForm struct {
	below int64
	sql   string
}

// olderForms: a hot statement -> its forms for older schemas, by below
// ascending.
var olderForms = map[string][]olderForm{}

// withOlderForms records sql's forms for older schemas (by below
// ascending) and returns sql.
func withOlderForms(sql string, forms ...olderForm) string {
	olderForms[sql] = forms
	return sql
}

// hot is sql in the form for the schema s was left at: sql itself on the
// newest.
func (s *Store) hot(sql string) string {
	if v := s.schemaAt.Load(); v != 0 {
		for _, f := range olderForms[sql] {
			if v < f.below {
				return f.sql
			}
		}
	}
	return sql
}
