package engine

import (
	"bytes"
	"maps"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/internal/intern"
	"github.com/x402gate/x402gate/verdictserver/policy"
)

// result is what one check found.
type result struct {
	status verdict.CheckStatus
	code   verdict.ReasonCode // failed only
	reason string
	field  string // triggeringPolicyField; "" is null
	ran    bool   // observed and expected go into evidence.observations
	obs    any
	exp    any
	fix    string // a failed check's suggested correction; "" when none makes sense
}

// suggest is r with the suggested correction fix (docs/verdict-api.md#observations).
func (r result) suggest(fix string) result {
	r.fix = fix
	return r
}

func notChecked(reason string) result { return result{status: verdict.CheckNotChecked, reason: reason} }

func passed(reason, field string, obs, exp any) result {
	return result{status: verdict.CheckPassed, reason: reason, field: field, ran: true, obs: obs, exp: exp}
}

func failed(code verdict.ReasonCode, reason, field string, obs, exp any) result {
	return result{status: verdict.CheckFailed, code: code, reason: reason, field: field, ran: true, obs: obs, exp: exp}
}

// check is one of the twelve checks, run on a decoded action and a policy.
type check struct {
	id  verdict.CheckID
	run func(ev *evaluation) result
}

// checks is every check in the table order of docs/verdict.md#checks, the order of a
// verdict's checks array.
var checks = []check{
	{verdict.CheckVenue, (*evaluation).venue},
	{verdict.CheckChain, (*evaluation).chain},
	{verdict.CheckContractSelector, (*evaluation).contractSelector},
	{verdict.CheckAsset, (*evaluation).asset},
	{verdict.CheckRecipient, (*evaluation).recipient},
	{verdict.CheckSide, (*evaluation).side},
	{verdict.CheckSlippageGuard, (*evaluation).slippage},
	{verdict.CheckExecutionPriceBound, (*evaluation).priceBound},
	{verdict.CheckLeverage, (*evaluation).leverage},
	{verdict.CheckSanctions, (*evaluation).screen},
	{verdict.CheckSinkRecipient, (*evaluation).sink},
	{verdict.CheckPerTxCap, (*evaluation).perTxCap},
}

// numChecks is len(checks).
const numChecks = 12

// checkIndex is the index of each check in checks.
var checkIndex = func() map[verdict.CheckID]int {
	m := make(map[verdict.CheckID]int, len(checks))
	for i, c := range checks {
		m[c.id] = i
	}
	if len(m) != numChecks {
		panic("engine: the check table does not have numChecks checks")
	}
	return m
}()

// reasonIndexes is reasonOrder as indexes into checks.
var reasonIndexes = func() []int {
	out := make([]int, len(reasonOrder))
	for i, id := range reasonOrder {
		out[i] = checkIndex[id]
	}
	return out
}()

// reasonOrder is the fixed order in which the first failed check decides a rejection
// (docs/policy.md#check-order).
var reasonOrder = []verdict.CheckID{
	verdict.CheckVenue, verdict.CheckChain, verdict.CheckContractSelector, verdict.CheckAsset,
	verdict.CheckRecipient, verdict.CheckSanctions, verdict.CheckSinkRecipient, verdict.CheckSide,
	verdict.CheckSlippageGuard, verdict.CheckExecutionPriceBound, verdict.CheckLeverage, verdict.CheckPerTxCap,
}

// docs/policy.md#default-deny: venues.allowed grants; without it nothing is allowed.
func (ev *evaluation) venue() result {
	p := ev.act.Protocol
	return ev.venueOf(p)
}

func (ev *evaluation) venueOf(p string) result {
	d := ev.in.Policy.Doc
	if d.Venues == nil || d.Venues.Allowed == nil {
		return failed(verdict.ReasonVenueNotAllowed, "venues.allowed is not configured, so the policy allows no venue", policy.FieldVenues, p, []string{}).
			suggest(noneAllowed(policy.FieldVenues))
	}
	if slices.Contains(d.Venues.Allowed, p) {
		return passed(prefixed(pVenue, p).Val, policy.FieldVenues, boxString(p), d.Venues.Allowed)
	}
	return failed(verdict.ReasonVenueNotAllowed, "venue "+p+" is not in venues.allowed", policy.FieldVenues, p, d.Venues.Allowed).
		suggest(useOneOf(policy.FieldVenues, d.Venues.Allowed))
}

func (ev *evaluation) chain() result { return ev.chainOf(ev.act.ChainID) }

func (ev *evaluation) chainOf(c int64) result {
	d := ev.in.Policy.Doc
	cs := intern.ChainKey(c)
	if d.Chains == nil || d.Chains.Allowed == nil {
		return failed(verdict.ReasonChainNotAllowed, "chains.allowed is not configured, so the policy allows no chain", policy.FieldChains, c, []int64{}).
			suggest(noneAllowed(policy.FieldChains))
	}
	if slices.Contains(d.Chains.Allowed, c) {
		return passed(prefixed(pChain, cs).Val, policy.FieldChains, boxInt64(c), d.Chains.Allowed)
	}
	return failed(verdict.ReasonChainNotAllowed, "chain "+cs+" is not in chains.allowed", policy.FieldChains, c, d.Chains.Allowed).
		suggest(useOneOf(policy.FieldChains, chainKeys(d.Chains.Allowed)))
}

// contractSelector checks the call and every call among the legs (a multicall's inner
// calls must be listed too: docs/policy.md#actions).
func (ev *evaluation) contractSelector() result {
	var calls []*Action
	ev.act.Walk(func(a *Action) {
		if a.To != nil {
			calls = append(calls, a)
		}
	})
	if len(calls) == 0 {
		return notChecked(kindReason(ev.act.Kind, kNotCall))
	}
	if ev.in.Policy.Doc.Contracts == nil {
		return notChecked("contracts is not configured")
	}
	var obs any
	if len(calls) == 1 {
		obs = map[string]any{"to": ev.hexAny(*calls[0].To), "selector": boxString(calls[0].Selector)}
	} else {
		list := make([]map[string]any, len(calls))
		for i, a := range calls {
			list[i] = map[string]any{"to": ev.hexAny(*a.To), "selector": boxString(a.Selector)}
		}
		obs = list
	}
	var last result
	for _, a := range calls {
		last = ev.callAllowed(a, obs)
		if last.status == verdict.CheckFailed {
			return last
		}
	}
	if len(calls) > 1 {
		last.reason = "every selector is allowed on its contract"
	}
	return last
}

func (ev *evaluation) callAllowed(act *Action, obs any) result {
	d := ev.in.Policy.Doc
	chainKey := intern.ChainKey(act.ChainID)
	byAddr, ok := d.Contracts[chainKey]
	if !ok {
		field := policy.FieldContracts + "." + chainKey
		return failed(verdict.ReasonContractOrSelector, "no contract is allowed on chain "+chainKey, field, obs, []string{}).
			suggest(noneAllowed(field))
	}
	for written, sels := range byAddr {
		if a, ok := intern.StrictAddress(written); !ok || a != *act.To {
			continue
		}
		field := policy.FieldContracts + "." + chainKey + "." + written
		for _, s := range sels {
			if strings.EqualFold(s, act.Selector) {
				return passed("selector "+act.Selector+" is allowed on "+ev.hex(*act.To), field, obs, sels)
			}
		}
		return failed(verdict.ReasonContractOrSelector, "selector "+act.Selector+" is not allowed on "+ev.hex(*act.To), field, obs, sels).
			suggest(useOneOf(field, sels))
	}
	field := policy.FieldContracts + "." + chainKey
	listed := slices.Sorted(maps.Keys(byAddr))
	return failed(verdict.ReasonContractOrSelector, "contract "+ev.hex(*act.To)+" is not allowed on chain "+chainKey, field, obs, listed).
		suggest(useOneOf(field, listed))
}

// asset: each chain's universe is its own constraint (docs/policy.md#sections).
func (ev *evaluation) asset() result {
	act, d := ev.act, ev.in.Policy.Doc
	if coins := ev.coins(); len(coins) > 0 {
		return ev.coinUniverse(coins)
	}
	assets := ev.all(func(a *Action) []common.Address { return a.Assets })
	if len(assets) == 0 {
		return notChecked(kindReason(act.Kind, kNoToken))
	}
	ck := intern.ChainKey(act.ChainID)
	var universe []string
	configured := false
	if d.Assets != nil && d.Assets.Universe != nil {
		universe, configured = d.Assets.Universe[ck]
	}
	if !configured || universe == nil {
		return notChecked(prefixed(pUniverseNot, ck).Val)
	}
	field := prefixed(pUniverse, ck).Val
	obs := ev.hexes(assets)
	for _, a := range assets {
		if !containsAddress(universe, a) {
			return failed(verdict.ReasonAssetNotInUniverse, "asset "+ev.hex(a)+" is not in "+field, field, obs, universe).
				suggest(useOneOf(field, universe))
		}
	}
	return passed(prefixed(pEveryAsset, field).Val, field, obs, universe)
}

func (ev *evaluation) recipient() result {
	act, d := ev.act, ev.in.Policy.Doc
	recipients := ev.all(recipientsOf)
	if len(recipients) == 0 {
		return notChecked(kindReason(act.Kind, kNoRecipient))
	}
	if d.Recipients == nil || d.Recipients.Allowed == nil {
		return notChecked("recipients.allowed is not configured")
	}
	allowed := d.Recipients.Allowed
	self := slices.Contains(allowed, policy.Self)
	obs := ev.hexes(recipients)
	for _, r := range recipients {
		if (self && r == ev.in.Escrow) || containsAddress(allowed, r) {
			continue
		}
		return failed(verdict.ReasonRecipientNotAllowed, "recipient "+ev.hex(r)+" is not in recipients.allowed", policy.FieldRecipients, obs, allowed).
			suggest(useOneOf(policy.FieldRecipients, ev.recipientsText(allowed)))
	}
	return passed("every recipient is allowed", policy.FieldRecipients, obs, allowed)
}

// screen is the sanctions check: always on, not a policy field (docs/policy.md#sanctions-list).
func (ev *evaluation) screen() result {
	n := 1
	ev.act.Walk(func(a *Action) {
		n += 1 + len(a.Recipients) + len(a.Assets) + len(a.Screen) + len(a.Stranded) + 2*len(a.Allowances)
	})
	addrs := make([]common.Address, 1, n)
	addrs[0] = ev.in.Escrow
	ev.act.Walk(func(a *Action) {
		if a.To != nil {
			addrs = append(addrs, *a.To)
		}
		addrs = append(addrs, a.Recipients...)
		addrs = append(addrs, a.Assets...)
		addrs = append(addrs, a.Screen...)
		addrs = append(addrs, a.Stranded...)
		for _, ap := range a.Allowances {
			addrs = append(addrs, ap.Spender, ap.Asset)
		}
	})
	return ev.screenAddrs(addrs)
}

func compareAddr(a, b common.Address) int { return bytes.Compare(a[:], b[:]) }

func (ev *evaluation) sink() result {
	act, d := ev.act, ev.in.Policy.Doc
	recipients := ev.all(recipientsOf)
	stranded := ev.all(func(a *Action) []common.Address { return a.Stranded })
	if len(recipients) == 0 && len(stranded) == 0 {
		return notChecked(kindReason(act.Kind, kNoRecipient))
	}
	assets := ev.all(func(a *Action) []common.Address { return a.Assets })
	var extra []string
	if d.Sinks != nil {
		extra = d.Sinks.Extra
	}
	obs := ev.hexes(append(slices.Clip(recipients), stranded...))
	if len(stranded) > 0 {
		return failed(verdict.ReasonSinkRecipient, "value is left at "+ev.hex(stranded[0])+" with no later transfer to a recipient", "", obs, "no stranded output").
			suggest("add a transfer of what is left at " + ev.hex(stranded[0]) + " to a recipient")
	}
	for _, r := range recipients {
		if name, ok := builtinSink(r); ok {
			return failed(verdict.ReasonSinkRecipient, "recipient "+ev.hex(r)+" is a sink: "+name, "", obs, "no built-in sink").
				suggest("send to a recipient that can spend what it receives, not to " + ev.hex(r))
		}
		if slices.Contains(assets, r) {
			return failed(verdict.ReasonSinkRecipient, "recipient "+ev.hex(r)+" is a sink: the token contract itself", "", obs, "not the token contract").
				suggest("send to a recipient, not to the token contract " + ev.hex(r))
		}
		if containsAddress(extra, r) {
			return failed(verdict.ReasonSinkRecipient, "recipient "+ev.hex(r)+" is in sinks.extra", policy.FieldSinksExtra, obs, extra).
				suggest("send to a recipient that is not in " + policy.FieldSinksExtra)
		}
	}
	return passed("no recipient is a sink", "", obs, "no sink")
}

// all gathers the addresses field gives on the action and every leg, without repeats, in
// the order met.
func (ev *evaluation) all(field func(*Action) []common.Address) []common.Address {
	if len(ev.act.Legs) == 0 {
		return field(ev.act)
	}
	var out []common.Address
	ev.act.Walk(func(a *Action) {
		for _, x := range field(a) {
			if !slices.Contains(out, x) {
				out = append(out, x)
			}
		}
	})
	return out
}

// perTxCap prices the notional even when no cap is configured: usdNotional reports it
// (docs/policy.md#pricing).
func (ev *evaluation) perTxCap() result {
	act, d := ev.act, ev.in.Policy.Doc
	moves := false
	act.Walk(func(a *Action) { moves = moves || exposes(a) })
	if !moves {
		return notChecked(kindReason(act.Kind, kNoValue))
	}
	usd, priced := ev.notional()
	var limit *float64
	if d.Limits != nil {
		limit = d.Limits.PerTxUSD
	}
	if limit == nil {
		return notChecked("limits.perTxUsd is not configured")
	}
	if !priced {
		return failed(verdict.ReasonDataUnavailable, "no USD price for "+ev.unpriced+" on chain "+strconv.FormatInt(act.ChainID, 10), policy.FieldPerTxUSD, "no USD price for "+ev.unpriced, *limit).
			suggest("use an asset the service can price, or ask the policy's operator to price " + ev.unpriced)
	}
	f := ratFloat64(usd)
	// Compare with the cap as written (0.3, not the binary float just below it).
	c := bound(*limit)
	if usd.Cmp(c.rat) > 0 {
		return failed(verdict.ReasonPerTxCapExceeded, "notional "+usd.FloatString(6)+" USD exceeds limits.perTxUsd "+c.text, policy.FieldPerTxUSD, f, c.f).
			suggest(ev.lowerNotional(usd, c))
	}
	return passed("notional "+usd.FloatString(6)+" USD is within limits.perTxUsd", policy.FieldPerTxUSD, f, c.f)
}

// notional prices, through the pricing table, everything the action and its legs expose;
// false when something has no price (ev.unpriced names it).
func (ev *evaluation) notional() (*big.Rat, bool) {
	if ev.priced {
		return ev.usd, ev.usd != nil
	}
	ev.priced = true
	var sum *big.Rat // read only: the first priced amount, then each new total
	add := func(v *big.Rat) {
		if sum == nil {
			sum = v
		} else {
			sum = new(big.Rat).Add(sum, v)
		}
	}
	ok := true
	ev.act.Walk(func(a *Action) {
		if ok {
			ev.unpriced, ok = ev.exposureUSD(a, add)
		}
	})
	if !ok {
		return nil, false
	}
	if sum == nil {
		sum = new(big.Rat)
	}
	ev.usd = sum
	return sum, true
}

// containsAddress reports whether list (policy addresses as written, checked by
// policy.Parse) holds a, in any case.
func containsAddress(list []string, a common.Address) bool {
	for _, s := range list {
		if b, ok := intern.LooseAddress(s); ok && b == a {
			return true
		}
	}
	return false
}

// coins gathers the Hyperliquid coins of the action and its legs, without repeats.
func (ev *evaluation) coins() []string {
	var out []string
	ev.act.Walk(func(a *Action) {
		for _, c := range a.Coins {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	})
	return out
}

// coinUniverse is the asset check over Hyperliquid coins: every one in assets.hyperliquid
// (docs/policy.md#hyperliquid-actions).
func (ev *evaluation) coinUniverse(coins []string) result {
	d := ev.in.Policy.Doc
	if d.Assets == nil || d.Assets.Hyperliquid == nil {
		return notChecked(policy.FieldHyperliquid + " is not configured")
	}
	universe := d.Assets.Hyperliquid
	for _, c := range coins {
		if !slices.Contains(universe, c) {
			return failed(verdict.ReasonAssetNotInUniverse, "coin "+c+" is not in "+policy.FieldHyperliquid, policy.FieldHyperliquid, coins, universe).
				suggest(useOneOf(policy.FieldHyperliquid, universe))
		}
	}
	return passed("every coin is in "+policy.FieldHyperliquid, policy.FieldHyperliquid, coins, universe)
}
