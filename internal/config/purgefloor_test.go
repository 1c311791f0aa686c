package config

import (
	"testing"
	"time"
)

// TestPurgeFloorToLibrary: the library runs with dlq.purge_floor, its
// default (7 days) when the file says nothing; a retention below the floor
// is accepted (the library holds closed dead letters for the floor, and
// the alert BackstopDLQPurgeBelowFloor names the mismatch).
func TestPurgeFloorToLibrary(t *testing.T) {
	var empty Config
	if got := empty.Library().PurgeFloor; got != DefaultPurgeFloor {
		t.Fatalf("default floor: %v", got)
	}
	c, err := Parse([]byte("dlq:\n  purge_floor: 72h\nretention:\n  dead_letters: 2h\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("a retention below the floor: %v", err)
	}
	if lib := c.Library(); lib.PurgeFloor != 72*time.Hour || lib.Retention.DeadLetters != 2*time.Hour {
		t.Fatalf("library: floor %v, retention %v", lib.PurgeFloor, lib.Retention.DeadLetters)
	}
}
