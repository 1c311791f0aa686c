package store

import (
	"context"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// Secrets keeps keys that every process sharing the database must agree on
// (the key of the remote workers' lease tokens, the root package's
// leasetoken.go). A secret is written once, by whichever process stores its
// random candidate first, and changed only by an operator's rotation, which
// keeps the value it replaces for a grace period (the lease tokens signed
// with it stay good until then).
type Secrets interface {
	// Secret returns the value stored under name; when there is none it
	// stores candidate (at now) and returns that. Concurrent callers with
	// different candidates all get the one value that was stored.
	Secret(ctx context.Context, name string, candidate []byte, now time.Time) ([]byte, error)
	// RotateSecret stores fresh under name (at now) and keeps the value it
	// replaces under name+PreviousSecret until previousUntil (replacing
	// an earlier previous value), and appends events (the rotation's
	// record), in one transaction. With nothing under name, fresh is stored
	// and nothing is kept.
	RotateSecret(ctx context.Context, name string, fresh []byte, now, previousUntil time.Time, events ...bt.Event) error
	// SecretVersions reads the value under name (nil: none yet) and the
	// previous one a rotation kept (nil: none) with the time until which
	// it is good.
	SecretVersions(ctx context.Context, name string) (current, previous []byte, previousUntil time.Time, err error)
}

// PreviousSecret suffixes the name under which a rotation keeps the value
// it replaced; that row's created_at is the time until which it is good.
const PreviousSecret = ".previous"
