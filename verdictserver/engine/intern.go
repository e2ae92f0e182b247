package engine

import (
	"encoding/hex"
	"math"
	"math/big"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// Values the evidence repeats from one evaluation to the next (addresses in EIP-55, the
// dates of sources, reasons that name a kind) are computed once and kept in small
// fixed-size caches: an EIP-55 checksum costs a Keccak-256, and each string built or boxed
// into evidence costs an allocation. A cache is direct-mapped and lock-free: a slot holds
// the last key hashed to it, so it stays bounded whatever the input, and a miss only
// computes the value again. Cached values are immutable.

// memoSlots is the number of slots of each cache (a power of two).
const memoSlots = 1024

type memoEntry[K comparable, V any] struct {
	key K
	val V
	box any // val as an interface value, boxed once
}

type memo[K comparable, V any] struct {
	slots [memoSlots]atomic.Pointer[memoEntry[K, V]]
}

// get returns the entry of k from slot h, computing the value with make on a miss.
func (m *memo[K, V]) get(k K, h uint64, make func(K) V) *memoEntry[K, V] {
	slot := &m.slots[h&(memoSlots-1)]
	if e := slot.Load(); e != nil && e.key == k {
		return e
	}
	v := make(k)
	e := &memoEntry[K, V]{key: k, val: v, box: v}
	slot.Store(e)
	return e
}

func fnv(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, x := range b {
		h = (h ^ uint64(x)) * 1099511628211
	}
	return h
}

func fnvString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h
}

// mix spreads the bits of x over the slots (splitmix64's finalizer): floats and
// timestamps differ in their high bits, chain ids in their low ones.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

var (
	checksums memo[common.Address, string]
	rfc3339s  memo[int64, string]
	strBoxes  memo[string, string]
	int64s    memo[int64, int64]
	ratios    memo[uint64, capValue]
)

// checksum is a.Hex(), the EIP-55 form of a, cached.
func checksum(a common.Address) *memoEntry[common.Address, string] {
	return checksums.get(a, fnv(a[:]), func(a common.Address) string { return a.Hex() })
}

// rfc3339 is t in UTC as RFC 3339 to the second, the form of a source's asOf, cached.
func rfc3339(t time.Time) *memoEntry[int64, string] {
	sec := t.Unix()
	return rfc3339s.get(sec, mix(uint64(sec)), func(sec int64) string {
		return time.Unix(sec, 0).UTC().Format(time.RFC3339)
	})
}

// boxString is s as an interface value, boxed once for the strings that recur (protocols,
// kinds, selectors, source names); use it for those only.
func boxString(s string) any {
	return strBoxes.get(s, fnvString(s), func(s string) string { return s }).box
}

// boxInt64 is n as an interface value (chain ids), boxed once.
func boxInt64(n int64) any {
	return int64s.get(n, mix(uint64(n)), func(n int64) int64 { return n }).box
}

// capValue is a policy bound (limits.perTxUsd, perps.maxLeverage) as written: the shortest
// decimal that reads back as the float, exactly, and as text.
type capValue struct {
	rat  *big.Rat // read only; nil when f has no decimal form
	text string   // strconv 'f', -1
	f    any      // the float64, boxed
}

func newCapValue(bits uint64) capValue {
	f := math.Float64frombits(bits)
	r, _ := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
	return capValue{rat: r, text: strconv.FormatFloat(f, 'f', -1, 64), f: f}
}

// bound is the capValue of f, cached.
func bound(f float64) capValue {
	return ratios.get(math.Float64bits(f), mix(math.Float64bits(f)), newCapValue).val
}

// reasonKey names a text the checks build from one string or one number.
type reasonKey struct {
	kind reasonKind
	s    string
	n    int64
}

type reasonKind uint8

// The texts reasonText caches.
const (
	rKindOf    reasonKind = iota // "this " + kind + s: a not_checked reason about the action's kind
	rPrefixed                    // a fixed prefix (n indexes reasonPrefixes) + s
	rChainKey                    // strconv.FormatInt(n, 10)
	rVersioned                   // the approved verdict's humanReason for policy version n
	rSelector                    // "0x" + the 4-byte selector n in hex
)

// reasonAffixes go before and after s in rPrefixed texts.
var reasonAffixes = [][2]string{
	pVenue: {"venue ", " is allowed"}, pVenueNot: {"venue ", " is not in venues.allowed"},
	pChain: {"chain ", " is allowed"}, pChainNot: {"chain ", " is not in chains.allowed"},
	pNoneOn: {"none on ", ""}, pNoAddressOn: {"no address is on ", ""},
	pUniverse: {"assets.universe.", ""}, pUniverseNot: {"assets.universe.", " is not configured"},
	pEveryAsset: {"every asset is in ", ""},
	pURLeg:      {"uniswap.ur.", ""}, pV4Leg: {"uniswap.v4.", ""},
}

// The indexes of reasonAffixes.
const (
	pVenue = iota
	pVenueNot
	pChain
	pChainNot
	pNoneOn
	pNoAddressOn
	pUniverse
	pUniverseNot
	pEveryAsset
	pURLeg // the kind of a Universal Router command's leg
	pV4Leg // the kind of a v4 action's leg
)

var reasons memo[reasonKey, string]

// reasonText is the text of k (build makes it), cached.
func reasonText(k reasonKey, build func(reasonKey) string) *memoEntry[reasonKey, string] {
	return reasons.get(k, fnvString(k.s)^mix(mix(uint64(k.n))^uint64(k.kind)), build)
}

// kindRests are the endings of the not_checked reasons that name the action's kind.
var kindRests = []string{
	kNotCall: " action is not a contract call", kNoToken: " action moves no token", kNoRecipient: " action has no recipient",
	kNoValue: " action moves no value", kNoSide: " action is not a swap or an order", kNoSwap: " action is not a swap",
	kNoOrder: " action is not an order", kNoLeverage: " action sets or implies none",
}

// kindPrefixes go before "this " + kind in the same reasons.
var kindPrefixes = []string{kNoSide: "no side applies: ", kNoSwap: "no slippage guard applies: ",
	kNoOrder: "no execution price bound applies: ", kNoLeverage: "no leverage applies: "}

// The indexes of kindRests.
const (
	kNotCall = iota
	kNoToken
	kNoRecipient
	kNoValue
	kNoSide
	kNoSwap
	kNoOrder
	kNoLeverage
)

// kindReason is a not_checked reason that names the action's kind:
// kindPrefixes[which] + "this " + kind + kindRests[which], cached.
func kindReason(kind string, which int) string {
	return reasonText(reasonKey{kind: rKindOf, s: kind, n: int64(which)}, func(k reasonKey) string {
		return kindPrefixes[k.n] + "this " + k.s + kindRests[k.n]
	}).val
}

// prefixed is s between the affixes of which, cached.
func prefixed(which int, s string) *memoEntry[reasonKey, string] {
	return reasonText(reasonKey{kind: rPrefixed, s: s, n: int64(which)}, func(k reasonKey) string {
		return reasonAffixes[k.n][0] + k.s + reasonAffixes[k.n][1]
	})
}

// byteTexts are "0x" and two hex digits, for each byte.
var byteTexts = func() (t [256]string) {
	for i := range t {
		t[i] = "0x" + hex.EncodeToString([]byte{byte(i)})
	}
	return t
}()

// byteText is "0x" and the two hex digits of b (a command or action byte).
func byteText(b byte) string { return byteTexts[b] }

// chainKey is strconv.FormatInt(id, 10), cached.
func chainKey(id int64) string {
	return reasonText(reasonKey{kind: rChainKey, n: id}, func(k reasonKey) string { return strconv.FormatInt(k.n, 10) }).val
}
