//go:build !unix

package pgstore

import "time"

// processCPU is unknown here: the benchmark's CPU figure reads 0.
func processCPU() time.Duration { return 0 }
