package engine

import (
	"math"
	"math/big"
	"strconv"
	"time"

	"github.com/x402gate/x402gate/verdictserver/engine/internal/intern"
)

// The engine's cached texts (internal/intern says why and how): the dates of sources, boxed
// strings and numbers, the policy's bounds, the reasons the checks write.

var (
	rfc3339s intern.Memo[int64, string]
	strBoxes intern.Memo[string, string]
	int64s   intern.Memo[int64, int64]
	ratios   intern.Memo[uint64, capValue]
)

// rfc3339 is t in UTC as RFC 3339 to the second, the form of a source's asOf, cached.
func rfc3339(t time.Time) *intern.Entry[int64, string] {
	sec := t.Unix()
	return rfc3339s.Get(sec, intern.Mix(uint64(sec)), func(sec int64) string {
		return time.Unix(sec, 0).UTC().Format(time.RFC3339)
	})
}

// boxString is s as an interface value, boxed once for the strings that recur (protocols,
// kinds, selectors, source names); use it for those only.
func boxString(s string) any {
	return strBoxes.Get(s, intern.FnvString(s), func(s string) string { return s }).Box
}

// boxInt64 is n as an interface value (chain ids), boxed once.
func boxInt64(n int64) any {
	return int64s.Get(n, intern.Mix(uint64(n)), func(n int64) int64 { return n }).Box
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
	return ratios.Get(math.Float64bits(f), intern.Mix(math.Float64bits(f)), newCapValue).Val
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
	rVersioned                   // the approved verdict's humanReason for policy version n
)

// reasonAffixes go before and after s in rPrefixed texts.
var reasonAffixes = [][2]string{
	pVenue: {"venue ", " is allowed"}, pVenueNot: {"venue ", " is not in venues.allowed"},
	pChain: {"chain ", " is allowed"}, pChainNot: {"chain ", " is not in chains.allowed"},
	pNoneOn: {"none on ", ""}, pNoAddressOn: {"no address is on ", ""},
	pUniverse: {"assets.universe.", ""}, pUniverseNot: {"assets.universe.", " is not configured"},
	pEveryAsset: {"every asset is in ", ""},
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
)

var reasons intern.Memo[reasonKey, string]

// reasonText is the text of k (build makes it), cached.
func reasonText(k reasonKey, build func(reasonKey) string) *intern.Entry[reasonKey, string] {
	return reasons.Get(k, intern.FnvString(k.s)^intern.Mix(intern.Mix(uint64(k.n))^uint64(k.kind)), build)
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
	}).Val
}

// prefixed is s between the affixes of which, cached.
func prefixed(which int, s string) *intern.Entry[reasonKey, string] {
	return reasonText(reasonKey{kind: rPrefixed, s: s, n: int64(which)}, func(k reasonKey) string {
		return reasonAffixes[k.n][0] + k.s + reasonAffixes[k.n][1]
	})
}
