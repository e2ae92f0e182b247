// Package intern computes the texts the policy engine repeats from one evaluation to the
// next once, and keeps them in small fixed-size caches: addresses in EIP-55, chain ids,
// selectors, reasons that name a kind. An EIP-55 checksum costs a Keccak-256, and each string
// built or boxed into evidence costs an allocation. A cache is direct-mapped and lock-free: a
// slot holds the last key hashed to it, so it stays bounded whatever the input, and a miss
// only computes the value again. Cached values are immutable. The package also reads
// addresses without allocating, for the decoders and the checks alike.
package intern

import (
	"strconv"
	"sync/atomic"

	"github.com/ethereum/go-ethereum/common"
)

// Slots is the number of slots of each cache (a power of two).
const Slots = 1024

// Entry is a cached value.
type Entry[K comparable, V any] struct {
	key K
	// Val is the value.
	Val V
	// Box is Val as an interface value, boxed once.
	Box any
}

// Memo is a cache of values by key; the zero value is empty and ready.
type Memo[K comparable, V any] struct {
	slots [Slots]atomic.Pointer[Entry[K, V]]
}

// Get returns the entry of k from slot h, computing the value with make on a miss.
func (m *Memo[K, V]) Get(k K, h uint64, make func(K) V) *Entry[K, V] {
	slot := &m.slots[h&(Slots-1)]
	if e := slot.Load(); e != nil && e.key == k {
		return e
	}
	v := make(k)
	e := &Entry[K, V]{key: k, Val: v, Box: v}
	slot.Store(e)
	return e
}

// Fnv is the FNV-1a hash of b.
func Fnv(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, x := range b {
		h = (h ^ uint64(x)) * 1099511628211
	}
	return h
}

// FnvString is the FNV-1a hash of s.
func FnvString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h
}

// Mix spreads the bits of x over the slots (splitmix64's finalizer): floats and
// timestamps differ in their high bits, chain ids in their low ones.
func Mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

var (
	checksums Memo[common.Address, string]
	chainKeys Memo[int64, string]
)

// Checksum is a.Hex(), the EIP-55 form of a, cached.
func Checksum(a common.Address) *Entry[common.Address, string] {
	return checksums.Get(a, Fnv(a[:]), func(a common.Address) string { return a.Hex() })
}

// ChainKey is strconv.FormatInt(id, 10), cached: the key of a chain in a policy's maps.
func ChainKey(id int64) string {
	return chainKeys.Get(id, Mix(uint64(id)), func(id int64) string { return strconv.FormatInt(id, 10) }).Val
}
