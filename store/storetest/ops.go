package storetest

import "testing"

// testOps: leader election, retention, statistics, views.
func (s *suite) testOps(t *testing.T) {
}
