//go:build !unix

package bench_test

import "time"

// processCPU is not measured here: cpu-µs/task reports 0.
func processCPU() time.Duration { return 0 }
