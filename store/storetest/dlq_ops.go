package storetest

import "testing"

// testDLQOps: replay, redrive, discard, resolve, purge, export.
func (s *suite) testDLQOps(t *testing.T) {
}
