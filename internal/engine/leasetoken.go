package engine

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"

	"github.com/backstophq/backstop/store"
)

// Lease tokens: the secret with which a remote worker proves it holds a
// lease (docs/api.md, "Worker protocol"). The attempt's execution id is
// public (GET /v1/tasks/{id}, events, logs), so it cannot be the proof: a
// token is "<execution id>.<mac>", mac the unpadded base64url
// HMAC-SHA256 of the execution id under a random 32-byte key kept in the
// database (store.Secrets), so that every process sharing the database,
// and one restarted mid-lease, verifies the tokens any of them handed out.
// An operator rotates the key (RotateLeaseKey); the replaced key verifies
// the tokens it signed until its grace is up.
// Only the claim's answer carries a token; nothing stored or shown does.
// A token is checked (in constant time) before any store call, and one
// that fails is answered exactly as a token whose lease is no longer
// current.

// leaseKeyName names the key in store.Secrets.
const leaseKeyName = "lease_token_key"

// Sizes of a lease token.
const (
	leaseKeyLen   = 32
	leaseMACText  = 43 // base64url of 32 bytes, unpadded
	maxLeaseToken = 512
)

// leaseDomain separates this MAC from any other use of the key.
const leaseDomain = "backstop lease token v1\x00"

// LeaseKeyRefresh is how often a process reads the lease key again (by the
// client's clock): a rotation (RotateLeaseKey, `backstop leases
// rotate-key`) reaches every process sharing the database within it.
const LeaseKeyRefresh = 30 * time.Second

// MaxLeaseKeyGrace bounds how long a rotated-out key stays good.
const MaxLeaseKeyGrace = 7 * 24 * time.Hour

// leaseKeys caches the keys read: the current one, which signs, and the one
// a rotation replaced, which still verifies until its time is up.
type leaseKeys struct {
	mu   sync.Mutex // one store round trip at a time
	keys atomic.Pointer[leaseKeySet]
}

type leaseKeySet struct {
	cur, prev []byte
	prevUntil time.Time
	read      time.Time // by the client's clock
}

// leaseKeySet returns the database's lease keys, storing a fresh random
// current key if there is none yet; they are read again after
// LeaseKeyRefresh (a failed read keeps the keys known, and tries again at
// the next refresh).
func (e *Engine) leaseKeySet(ctx context.Context) (*leaseKeySet, error) {
	return e.leaseKeysNewerThan(ctx, LeaseKeyRefresh)
}

// leaseKeysNewerThan is leaseKeySet with keys read at most maxAge ago.
func (e *Engine) leaseKeysNewerThan(ctx context.Context, maxAge time.Duration) (*leaseKeySet, error) {
	lk := &e.lkeys
	now := e.Now()
	fresh := func(k *leaseKeySet) bool { return k != nil && now.Sub(k.read) < maxAge && !now.Before(k.read) }
	if k := lk.keys.Load(); fresh(k) {
		return k, nil
	}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	known := lk.keys.Load()
	if fresh(known) {
		return known, nil
	}
	ks, err := e.readLeaseKeys(ctx, now)
	if err != nil {
		if known == nil {
			return nil, err
		}
		e.cfg.Logger.Warn("reading the lease token key again failed: keeping the one known", "error", err)
		again := *known
		again.read = now
		lk.keys.Store(&again)
		return &again, nil
	}
	lk.keys.Store(ks)
	return ks, nil
}

func (e *Engine) readLeaseKeys(ctx context.Context, now time.Time) (*leaseKeySet, error) {
	cur, prev, until, err := e.store.SecretVersions(ctx, leaseKeyName)
	if err != nil {
		return nil, fmt.Errorf("backstop: lease token key: %w", err)
	}
	if cur == nil {
		candidate := make([]byte, leaseKeyLen)
		if _, err := rand.Read(candidate); err != nil {
			return nil, fmt.Errorf("backstop: lease token key: %w", err)
		}
		if cur, err = e.store.Secret(ctx, leaseKeyName, candidate, now); err != nil {
			return nil, fmt.Errorf("backstop: lease token key: %w", err)
		}
	}
	if len(cur) < leaseKeyLen {
		return nil, fmt.Errorf("backstop: lease token key: the stored key has %d bytes, want %d", len(cur), leaseKeyLen)
	}
	ks := &leaseKeySet{cur: cur, read: now}
	if len(prev) >= leaseKeyLen {
		ks.prev, ks.prevUntil = prev, until
	}
	return ks, nil
}

// LeaseKey returns the key that signs new lease tokens.
func (e *Engine) LeaseKey(ctx context.Context) ([]byte, error) {
	ks, err := e.leaseKeySet(ctx)
	if err != nil {
		return nil, err
	}
	return ks.cur, nil
}

// RotateLeaseKey replaces the key that signs remote workers' lease tokens
// with a fresh random one; the key it replaces still verifies the tokens it
// signed for grace (at most MaxLeaseKeyGrace), so the leases held now run
// on; after that a worker still holding such a token gets
// lease_not_current, and its attempt is retried when the lease expires.
// Every process sharing the database picks up the new key within
// LeaseKeyRefresh (this one at once). It answers the time until which the
// old key stays good. Rotate when a token or the key may have leaked.
func (e *Engine) RotateLeaseKey(ctx context.Context, grace time.Duration) (time.Time, error) {
	if grace < 0 || grace > MaxLeaseKeyGrace {
		return time.Time{}, Invalid("grace", "must be between 0s and %s", MaxLeaseKeyGrace)
	}
	fresh := make([]byte, leaseKeyLen)
	if _, err := rand.Read(fresh); err != nil {
		return time.Time{}, fmt.Errorf("backstop: lease token key: %w", err)
	}
	now := e.Now()
	until := now.Add(grace)
	actor := store.ActorFrom(ctx, store.DefaultActor)
	// The audit trail, written with the rotation: who rotated, and until
	// when the old tokens are good (never a key).
	body, _ := json.Marshal(map[string]any{"grace": bt.Duration(grace), "previous_good_until": until.UTC()})
	if err := e.store.RotateSecret(ctx, leaseKeyName, fresh, now, until, store.NewEvent(now, "lease_key.rotated", "", "", "", actor, body)); err != nil {
		return time.Time{}, fmt.Errorf("backstop: rotate the lease token key: %w", err)
	}
	e.lkeys.keys.Store(nil) // read again at the next use
	e.cfg.Logger.Info("rotated the lease token key", "previous_good_until", until, "actor", actor)
	return until, nil
}

func leaseMAC(key []byte, executionID string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(leaseDomain))
	h.Write([]byte(executionID))
	return h.Sum(nil)
}

// MintLeaseToken is the token of the lease executionID names.
func MintLeaseToken(key []byte, executionID string) string {
	return executionID + "." + base64.RawURLEncoding.EncodeToString(leaseMAC(key, executionID))
}

// parseLeaseToken splits a token into the execution id it names and its
// MAC; ok is false when it does not have a token's shape.
func parseLeaseToken(token string) (executionID string, mac []byte, ok bool) {
	if len(token) > maxLeaseToken {
		return "", nil, false
	}
	i := strings.LastIndexByte(token, '.')
	if i <= 0 || len(token)-i-1 != leaseMACText {
		return "", nil, false
	}
	// The decoder skips \r and \n: the length of what it decoded is
	// checked, not only the text's.
	mac, err := base64.RawURLEncoding.Strict().DecodeString(token[i+1:])
	if err != nil || len(mac) != sha256.Size {
		return "", nil, false
	}
	return token[:i], mac, true
}

// verifyLeaseToken returns the execution id a token names when key signed
// it.
func verifyLeaseToken(key []byte, token string) (string, bool) {
	exec, mac, ok := parseLeaseToken(token)
	if !ok {
		return "", false
	}
	if !hmac.Equal(mac, leaseMAC(key, exec)) {
		return "", false
	}
	return exec, true
}

// LeaseOf checks a remote call's task id and lease token and returns the
// execution the token names. A token this database's key did not sign gets
// the answer of a lease that is no longer current (leaseError), so a
// guess learns nothing a stale token would not.
func (e *Engine) LeaseOf(ctx context.Context, taskID, token string) (string, error) {
	if err := CheckLease(taskID, token); err != nil {
		return "", err
	}
	exec, ok, err := e.LeaseExecution(ctx, token)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", e.LeaseError(ctx, taskID)
	}
	return exec, nil
}

// LeaseExecution returns the execution id token names, ok when this
// database's key signed it.
func (e *Engine) LeaseExecution(ctx context.Context, token string) (exec string, ok bool, err error) {
	ks, err := e.leaseKeySet(ctx)
	if err != nil {
		return "", false, err
	}
	if exec, ok = ks.verify(token, e.Now()); ok {
		return exec, true, nil
	}
	// Signed with a key this process has not read yet (another process
	// rotated it): read the keys again, at most once a second, and look
	// again, so that a rotation never refuses a good token.
	if _, _, ok := parseLeaseToken(token); !ok {
		return "", false, nil
	}
	if ks, err = e.leaseKeysNewerThan(ctx, time.Second); err != nil {
		return "", false, err
	}
	exec, ok = ks.verify(token, e.Now())
	return exec, ok, nil
}

// verify returns the execution id token names when the current key, or
// the previous one until its time is up, signed it.
func (ks *leaseKeySet) verify(token string, now time.Time) (string, bool) {
	if exec, ok := verifyLeaseToken(ks.cur, token); ok {
		return exec, true
	}
	if ks.prev != nil && now.Before(ks.prevUntil) {
		return verifyLeaseToken(ks.prev, token)
	}
	return "", false
}

// ErrLeaseNotCurrent: a call named a lease (its lease token) that is no
// longer the task's current lease; nothing changed. It wraps
// store.ErrConflict.
var ErrLeaseNotCurrent = fmt.Errorf("lease not current: %w", store.ErrConflict)

// CheckLease checks that a call names a task and a lease token.
func CheckLease(taskID, token string) error {
	if taskID == "" {
		return Invalid("id", "task id is required")
	}
	if token == "" {
		return Invalid("lease_token", "is required")
	}
	return nil
}

// LeaseError explains a settlement or heartbeat that did not apply.
func (e *Engine) LeaseError(ctx context.Context, taskID string) error {
	t, err := e.store.Get(ctx, taskID)
	if err != nil {
		return err // ErrNotFound, or the store's failure
	}
	return fmt.Errorf("%w: the lease token is not the current lease of task %q (it is %s)", ErrLeaseNotCurrent, taskID, t.State)
}
