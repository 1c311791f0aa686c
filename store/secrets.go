package store

import (
	"context"
	"time"
)

// Secrets keeps keys that every process sharing the database must agree on
// (the key of the remote workers' lease tokens, the root package's
// leasetoken.go). A secret is written once and never changed: the engine
// draws a random candidate, and whichever process stores one first wins.
type Secrets interface {
	// Secret returns the value stored under name; when there is none it
	// stores candidate (at now) and returns that. Concurrent callers with
	// different candidates all get the one value that was stored.
	Secret(ctx context.Context, name string, candidate []byte, now time.Time) ([]byte, error)
}
