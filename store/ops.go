package store

// Ops is what maintenance beyond the hot path needs from a store: leader
// election among processes, retention, statistics.
type Ops interface {
}
