package api

import (
	"sync"
	"time"

	"github.com/backstophq/backstop/store"
)

// TokenCacheTTL is how long a token looked up by its hash is reused
// without reading the store again: a revocation takes effect within it.
// It spares the worker protocol one read per request.
const TokenCacheTTL = time.Second

// maxCachedTokens bounds the cache; beyond it, it starts afresh.
const maxCachedTokens = 10000

type tokenCache struct {
	mu sync.Mutex
	m  map[string]cachedToken // key: the secret's hash
}

type cachedToken struct {
	t  *store.Token
	at time.Time // the server clock's time of the lookup
}

func (c *tokenCache) get(hash []byte, now time.Time) *store.Token {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[string(hash)]
	if !ok || now.Sub(e.at) >= TokenCacheTTL || now.Before(e.at) {
		return nil
	}
	return e.t
}

func (c *tokenCache) put(hash []byte, t *store.Token, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedTokens {
		c.m = map[string]cachedToken{}
	}
	c.m[string(hash)] = cachedToken{t: t, at: now}
}
