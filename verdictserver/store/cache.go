package store

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Caches of the lookups behind every request (docs/verdict-api.md#authentication): keys by
// their hash, wallet owners, and terminal verdicts by request hash. All are bounded LRUs
// in this process.
const (
	// keyCacheSize bounds the keys a Store remembers.
	keyCacheSize = 4096
	// KeyCacheTTL is how long a Store trusts a key it looked up: a key revoked through
	// this Store is refused at once, one revoked through another instance (or the
	// `caddy verdict` command) at most this long after.
	KeyCacheTTL = time.Second
	// walletCacheSize bounds the wallet owners a Store remembers.
	walletCacheSize = 16384
	// verdictCacheSize bounds the terminal verdicts a Store remembers (each is its
	// owner, status and stored verdict JSON, a few KiB at most).
	verdictCacheSize = 4096
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

// immutableCache remembers values that never change once read, in a bounded LRU: the
// owner of a wallet (a wallet is never removed nor handed to another agent: AddWallet
// refuses), and a terminal verdict (Complete moves a record once, and never again). What it
// holds stays true on every instance.
type immutableCache[K comparable, V any] struct {
	mu  sync.Mutex
	lru *simplelru.LRU[K, V]
}

func newImmutableCache[K comparable, V any](size int) *immutableCache[K, V] {
	lru, _ := simplelru.NewLRU[K, V](size, nil) // fails only for size <= 0
	return &immutableCache[K, V]{lru: lru}
}

func (c *immutableCache[K, V]) get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Get(k)
}

func (c *immutableCache[K, V]) put(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Add(k, v)
}
