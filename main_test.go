package backstop

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: no
// worker, maintainer, batcher or follower outlives its Stop.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
