package backstop

import (
	"errors"
	"strconv"
	"testing"
	"time"
)

// FuzzExecutionCursor: a worker-executions cursor is "<unix µs>_<id>"; what
// a page hands out reads back as the same key, and anything else is refused
// as a bad "after" without a panic.
func FuzzExecutionCursor(f *testing.F) {
	for _, s := range []string{"1732700000123456_019368a0-7c1e-7000-8000-000000000001", "0_x", "-1_x", "_x", "12_", "12",
		"99999999999999999999_x", "1_a_b", "1_\x00", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := parseExecutionCursor(s)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || ve.Field != "after" {
				t.Fatalf("%q: %v is not a validation error naming after", s, err)
			}
			return
		}
		if ValidID(k.ExecutionID) != nil || k.StartedAt.Before(time.Unix(0, 0)) {
			t.Fatalf("%q: accepted %+v", s, k)
		}
		again := strconv.FormatInt(k.StartedAt.UnixMicro(), 10) + "_" + k.ExecutionID
		if k2, err := parseExecutionCursor(again); err != nil || !k2.StartedAt.Equal(k.StartedAt) || k2.ExecutionID != k.ExecutionID {
			t.Fatalf("%q: %q does not read back (%+v, %v)", s, again, k2, err)
		}
	})
}
