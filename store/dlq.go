package store

// DLQ is what the dead-letter operations (replay, redrive, discard, resolve,
// purge, export) need from a store.
type DLQ interface {
}
