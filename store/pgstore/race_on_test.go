//go:build race

package pgstore

// raceEnabled: the race detector is on. It changes what allocation counts
// mean (sync.Pool drops a share of what is put back), so tests of
// allocations skip under it.
const raceEnabled = true
