package store

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Caches of the lookups behind every request (docs/verdict-api.md#authentication): keys by
// their hash, and wallet owners. Both are bounded LRUs in this process.
const (
	// keyCacheSize bounds the keys a Store remembers.
	keyCacheSize = 4096
	// KeyCacheTTL is how long a Store trusts a key it looked up: a key revoked through
	// this Store is refused at once, one revoked through another instance (or the
	// `caddy verdict` command) at most this long after.
	KeyCacheTTL = time.Second
	// walletCacheSize bounds the wallet owners a Store remembers.
	walletCacheSize = 16384
)

// keyCache remembers valid keys by hash for KeyCacheTTL. A revocation bumps the
// generation, and a lookup that began before it does not fill the cache: a key read from
// the database just before its revocation committed is never remembered after it.
type keyCache struct {
	mu  sync.Mutex
	gen uint64
	lru *simplelru.LRU[[32]byte, cachedKey]
	now func() time.Time
}

type cachedKey struct {
	key Key
	at  time.Time
}

func newKeyCache() *keyCache {
	lru, _ := simplelru.NewLRU[[32]byte, cachedKey](keyCacheSize, nil) // fails only for size <= 0
	return &keyCache{lru: lru, now: time.Now}
}

// get returns the remembered key of hash, if it is fresh. Its Scopes are shared: read only.
func (c *keyCache) get(hash [32]byte) (Key, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lru.Get(hash)
	if !ok {
		return Key{}, false
	}
	if c.now().Sub(e.at) >= KeyCacheTTL {
		c.lru.Remove(hash)
		return Key{}, false
	}
	return e.key, true
}

// generation is the revocation count, taken before a database lookup and handed to put.
func (c *keyCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// put remembers k unless a revocation happened since gen was taken.
func (c *keyCache) put(hash [32]byte, k Key, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen == c.gen {
		c.lru.Add(hash, cachedKey{key: k, at: c.now()})
	}
}

// revoke forgets the key keyID and fences the lookups under way.
func (c *keyCache) revoke(keyID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for _, h := range c.lru.Keys() {
		if e, ok := c.lru.Peek(h); ok && e.key.ID == keyID {
			c.lru.Remove(h)
		}
	}
}

// walletKey names a wallet: chain and address.
type walletKey struct {
	chainID int64
	addr    [20]byte
}

// walletCache remembers who owns a wallet. A wallet is never removed nor handed to
// another agent (AddWallet refuses), so an owner once read stays true on every instance.
type walletCache struct {
	mu  sync.Mutex
	lru *simplelru.LRU[walletKey, string]
}

func newWalletCache() *walletCache {
	lru, _ := simplelru.NewLRU[walletKey, string](walletCacheSize, nil)
	return &walletCache{lru: lru}
}

func (c *walletCache) get(k walletKey) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Get(k)
}

func (c *walletCache) put(k walletKey, agentID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Add(k, agentID)
}
