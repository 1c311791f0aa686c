package bench

import (
	"fmt"
	"runtime"
	"time"
)

// cost measures what this process spends while the worker drains: CPU
// (user and system, where the platform tells) and heap allocations. With
// Postgres the server's CPU is not in it; with SQLite it is.
type cost struct {
	cpu     time.Duration
	mallocs uint64
}

func startCost() cost {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return cost{cpu: processCPU(), mallocs: ms.Mallocs}
}

// report is the progress line of a drain of n tasks.
func (c cost) report(n int) string {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	line := fmt.Sprintf("bench: drain cost in this process: allocs_per_task=%.1f", float64(ms.Mallocs-c.mallocs)/float64(n))
	if cpu := processCPU(); cpu > 0 {
		line += fmt.Sprintf(" cpu=%.3fs cpu_us_per_task=%.2f", (cpu - c.cpu).Seconds(), float64((cpu-c.cpu).Nanoseconds())/1e3/float64(n))
	}
	return line
}
