package backstop

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
)

// Lease tokens: the secret with which a remote worker proves it holds a
// lease (docs/api.md, "Worker protocol"). The attempt's execution id is
// public (GET /v1/tasks/{id}, events, logs), so it cannot be the proof: a
// token is "<execution id>.<mac>", mac the unpadded base64url
// HMAC-SHA256 of the execution id under a random 32-byte key kept in the
// database (store.Secrets), so that every process sharing the database,
// and one restarted mid-lease, verifies the tokens any of them handed out.
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

// leaseKeys caches the key once read: it never changes.
type leaseKeys struct {
	mu  sync.Mutex // one store round trip at a time
	key atomic.Pointer[[]byte]
}

// leaseKey returns the database's lease key, storing a fresh random one if
// there is none yet.
func (c *Client) leaseKey(ctx context.Context) ([]byte, error) {
	lk := &c.lkeys
	if k := lk.key.Load(); k != nil {
		return *k, nil
	}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if k := lk.key.Load(); k != nil {
		return *k, nil
	}
	candidate := make([]byte, leaseKeyLen)
	if _, err := rand.Read(candidate); err != nil {
		return nil, fmt.Errorf("backstop: lease token key: %w", err)
	}
	k, err := c.store.Secret(ctx, leaseKeyName, candidate, c.now())
	if err != nil {
		return nil, fmt.Errorf("backstop: lease token key: %w", err)
	}
	if len(k) < leaseKeyLen {
		return nil, fmt.Errorf("backstop: lease token key: the stored key has %d bytes, want %d", len(k), leaseKeyLen)
	}
	lk.key.Store(&k)
	return k, nil
}

func leaseMAC(key []byte, executionID string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(leaseDomain))
	h.Write([]byte(executionID))
	return h.Sum(nil)
}

// mintLeaseToken is the token of the lease executionID names.
func mintLeaseToken(key []byte, executionID string) string {
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

// leaseOf checks a remote call's task id and lease token and returns the
// execution the token names. A token this database's key did not sign gets
// the answer of a lease that is no longer current (leaseError), so a
// guess learns nothing a stale token would not.
func (c *Client) leaseOf(ctx context.Context, taskID, token string) (string, error) {
	if err := checkLease(taskID, token); err != nil {
		return "", err
	}
	exec, ok, err := c.leaseExecution(ctx, token)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", c.leaseError(ctx, taskID)
	}
	return exec, nil
}

// leaseExecution returns the execution id token names, ok when this
// database's key signed it.
func (c *Client) leaseExecution(ctx context.Context, token string) (exec string, ok bool, err error) {
	key, err := c.leaseKey(ctx)
	if err != nil {
		return "", false, err
	}
	exec, ok = verifyLeaseToken(key, token)
	return exec, ok, nil
}
