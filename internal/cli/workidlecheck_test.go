package cli

import (
	"testing"
	"time"
)

// An idle worker looks again when it would reach --exit-after-idle, not a
// polling period later; a busy one every quarter of the limit (at most
// 250ms).
func TestIdleCheck(t *testing.T) {
	for _, c := range []struct {
		idle, limit, want time.Duration
	}{
		{0, 300 * time.Millisecond, 75 * time.Millisecond},
		{0, 10 * time.Second, 250 * time.Millisecond},
		{80 * time.Millisecond, 300 * time.Millisecond, 220 * time.Millisecond},
		{299 * time.Millisecond, 300 * time.Millisecond, time.Millisecond},
		{3 * time.Second, 10 * time.Second, 7 * time.Second},
	} {
		if got := idleCheck(c.idle, c.limit); got != c.want {
			t.Errorf("idleCheck(%s, %s) = %s, want %s", c.idle, c.limit, got, c.want)
		}
	}
}
