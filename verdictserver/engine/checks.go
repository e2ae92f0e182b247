package engine

import (
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
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
	{verdict.CheckSide, notATrade("side")},
	{verdict.CheckSlippageGuard, notATrade("slippage guard")},
	{verdict.CheckExecutionPriceBound, notATrade("execution price bound")},
	{verdict.CheckLeverage, notATrade("leverage")},
	{verdict.CheckSanctions, (*evaluation).screen},
	{verdict.CheckSinkRecipient, (*evaluation).sink},
	{verdict.CheckPerTxCap, (*evaluation).perTxCap},
}

// reasonOrder is the fixed order in which the first failed check decides a rejection
// (docs/policy.md#check-order).
var reasonOrder = []verdict.CheckID{
	verdict.CheckVenue, verdict.CheckChain, verdict.CheckContractSelector, verdict.CheckAsset,
	verdict.CheckRecipient, verdict.CheckSanctions, verdict.CheckSinkRecipient, verdict.CheckSide,
	verdict.CheckSlippageGuard, verdict.CheckExecutionPriceBound, verdict.CheckLeverage, verdict.CheckPerTxCap,
}

// notATrade is the answer of the trading checks for actions that are not trades; the
// decoders of trades (docs/policy.md#sections: trading, swaps, orders, perps) give them
// their fields.
func notATrade(what string) func(ev *evaluation) result {
	return func(ev *evaluation) result {
		return notChecked("no " + what + " applies: this " + ev.act.Kind + " action is not a trade")
	}
}

// docs/policy.md#default-deny: venues.allowed grants; without it nothing is allowed.
func (ev *evaluation) venue() result {
	p := ev.act.Protocol
	return ev.venueOf(p)
}

func (ev *evaluation) venueOf(p string) result {
	d := ev.in.Policy.Doc
	if d.Venues == nil || d.Venues.Allowed == nil {
		return failed(verdict.ReasonVenueNotAllowed, "venues.allowed is not configured, so the policy allows no venue", policy.FieldVenues, p, nil)
	}
	if slices.Contains(d.Venues.Allowed, p) {
		return passed("venue "+p+" is allowed", policy.FieldVenues, p, d.Venues.Allowed)
	}
	return failed(verdict.ReasonVenueNotAllowed, "venue "+p+" is not in venues.allowed", policy.FieldVenues, p, d.Venues.Allowed)
}

func (ev *evaluation) chain() result { return ev.chainOf(ev.act.ChainID) }

func (ev *evaluation) chainOf(c int64) result {
	d := ev.in.Policy.Doc
	cs := strconv.FormatInt(c, 10)
	if d.Chains == nil || d.Chains.Allowed == nil {
		return failed(verdict.ReasonChainNotAllowed, "chains.allowed is not configured, so the policy allows no chain", policy.FieldChains, c, nil)
	}
	if slices.Contains(d.Chains.Allowed, c) {
		return passed("chain "+cs+" is allowed", policy.FieldChains, c, d.Chains.Allowed)
	}
	return failed(verdict.ReasonChainNotAllowed, "chain "+cs+" is not in chains.allowed", policy.FieldChains, c, d.Chains.Allowed)
}

func (ev *evaluation) contractSelector() result {
	act, d := ev.act, ev.in.Policy.Doc
	if act.To == nil {
		return notChecked("this " + act.Kind + " action is not a contract call")
	}
	if d.Contracts == nil {
		return notChecked("contracts is not configured")
	}
	chainKey := strconv.FormatInt(act.ChainID, 10)
	obs := map[string]any{"to": ev.hex(*act.To), "selector": act.Selector}
	byAddr, ok := d.Contracts[chainKey]
	if !ok {
		return failed(verdict.ReasonContractOrSelector, "no contract is allowed on chain "+chainKey, policy.FieldContracts+"."+chainKey, obs, nil)
	}
	for written, sels := range byAddr {
		if a, ok := policy.Address(written); !ok || a != *act.To {
			continue
		}
		field := policy.FieldContracts + "." + chainKey + "." + written
		for _, s := range sels {
			if strings.EqualFold(s, act.Selector) {
				return passed("selector "+act.Selector+" is allowed on "+ev.hex(*act.To), field, obs, sels)
			}
		}
		return failed(verdict.ReasonContractOrSelector, "selector "+act.Selector+" is not allowed on "+ev.hex(*act.To), field, obs, sels)
	}
	return failed(verdict.ReasonContractOrSelector, "contract "+ev.hex(*act.To)+" is not allowed on chain "+chainKey, policy.FieldContracts+"."+chainKey, obs, nil)
}

// asset: each chain's universe is its own constraint (docs/policy.md#sections).
func (ev *evaluation) asset() result {
	act, d := ev.act, ev.in.Policy.Doc
	if len(act.Assets) == 0 {
		return notChecked("this " + act.Kind + " action moves no token")
	}
	chainKey := strconv.FormatInt(act.ChainID, 10)
	var universe []string
	configured := false
	if d.Assets != nil && d.Assets.Universe != nil {
		universe, configured = d.Assets.Universe[chainKey]
	}
	if !configured || universe == nil {
		return notChecked("assets.universe." + chainKey + " is not configured")
	}
	field := policy.FieldAssetUniverse + "." + chainKey
	obs := ev.hexes(act.Assets)
	for _, a := range act.Assets {
		if !containsAddress(universe, a) {
			return failed(verdict.ReasonAssetNotInUniverse, "asset "+ev.hex(a)+" is not in "+field, field, obs, universe)
		}
	}
	return passed("every asset is in "+field, field, obs, universe)
}

func (ev *evaluation) recipient() result {
	act, d := ev.act, ev.in.Policy.Doc
	if len(act.Recipients) == 0 {
		return notChecked("this " + act.Kind + " action has no recipient")
	}
	if d.Recipients == nil || d.Recipients.Allowed == nil {
		return notChecked("recipients.allowed is not configured")
	}
	allowed := d.Recipients.Allowed
	self := slices.Contains(allowed, policy.Self)
	obs := ev.hexes(act.Recipients)
	for _, r := range act.Recipients {
		if (self && r == ev.in.Escrow) || containsAddress(allowed, r) {
			continue
		}
		return failed(verdict.ReasonRecipientNotAllowed, "recipient "+ev.hex(r)+" is not in recipients.allowed", policy.FieldRecipients, obs, allowed)
	}
	return passed("every recipient is allowed", policy.FieldRecipients, obs, allowed)
}

// screen is the sanctions check: always on, not a policy field (docs/policy.md#sanctions-list).
func (ev *evaluation) screen() result {
	l := ev.sanctions
	if l == nil {
		return notChecked("no sanctions list is loaded")
	}
	ev.source(l.Name(), l.AsOf(), ev.sanctionsFresh())
	act := ev.act
	addrs := []common.Address{ev.in.Escrow}
	if act.To != nil {
		addrs = append(addrs, *act.To)
	}
	addrs = append(addrs, act.Recipients...)
	addrs = append(addrs, act.Assets...)
	addrs = append(addrs, act.Screen...)
	var hits []common.Address
	for i, a := range addrs {
		if l.Contains(a) && !slices.Contains(addrs[:i], a) {
			hits = append(hits, a)
		}
	}
	obs := ev.sortedHexes(slices.Compact(slices.SortedFunc(slices.Values(addrs), compareAddr)))
	exp := "none on " + l.Name()
	if len(hits) > 0 {
		return failed(verdict.ReasonSanctionedAddress, "sanctioned address "+ev.hex(hits[0])+" ("+l.Name()+")", "", map[string]any{"screened": obs, "listed": ev.sortedHexes(hits)}, exp)
	}
	return passed("no address is on "+l.Name(), "", map[string]any{"screened": obs, "listed": []string{}}, exp)
}

func compareAddr(a, b common.Address) int { return strings.Compare(string(a[:]), string(b[:])) }

func (ev *evaluation) sink() result {
	act, d := ev.act, ev.in.Policy.Doc
	if len(act.Recipients) == 0 {
		return notChecked("this " + act.Kind + " action has no recipient")
	}
	var extra []string
	if d.Sinks != nil {
		extra = d.Sinks.Extra
	}
	obs := ev.hexes(act.Recipients)
	for _, r := range act.Recipients {
		if name, ok := builtinSink(r); ok {
			return failed(verdict.ReasonSinkRecipient, "recipient "+ev.hex(r)+" is a sink: "+name, "", obs, "no built-in sink")
		}
		if slices.Contains(act.Assets, r) {
			return failed(verdict.ReasonSinkRecipient, "recipient "+ev.hex(r)+" is a sink: the token contract itself", "", obs, "not the token contract")
		}
		if containsAddress(extra, r) {
			return failed(verdict.ReasonSinkRecipient, "recipient "+ev.hex(r)+" is in sinks.extra", policy.FieldSinksExtra, obs, extra)
		}
	}
	return passed("no recipient is a sink", "", obs, "no sink")
}

// perTxCap prices the notional even when no cap is configured: usdNotional reports it
// (docs/policy.md#prices).
func (ev *evaluation) perTxCap() result {
	act, d := ev.act, ev.in.Policy.Doc
	if len(act.Notional) == 0 {
		return notChecked("this " + act.Kind + " action moves no value")
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
		return failed(verdict.ReasonDataUnavailable, "no USD price for "+ev.hex(act.Notional[0].Asset)+" on chain "+strconv.FormatInt(act.ChainID, 10), policy.FieldPerTxUSD, nil, *limit)
	}
	f, _ := usd.Float64()
	// Compare with the cap as written (0.3, not the binary float just below it).
	capRat, _ := new(big.Rat).SetString(strconv.FormatFloat(*limit, 'g', -1, 64))
	if usd.Cmp(capRat) > 0 {
		return failed(verdict.ReasonPerTxCapExceeded, "notional "+usd.FloatString(6)+" USD exceeds limits.perTxUsd "+strconv.FormatFloat(*limit, 'f', -1, 64), policy.FieldPerTxUSD, f, *limit)
	}
	return passed("notional "+usd.FloatString(6)+" USD is within limits.perTxUsd", policy.FieldPerTxUSD, f, *limit)
}

// notional prices every amount the action moves; false when one has no price.
func (ev *evaluation) notional() (*big.Rat, bool) {
	if ev.priced {
		return ev.usd, ev.usd != nil
	}
	ev.priced = true
	ev.source("prices", ev.prices.AsOf(), true)
	sum := new(big.Rat)
	for _, a := range ev.act.Notional {
		v, ok := ev.prices.USD(ev.act.ChainID, a.Asset, a.Value)
		if !ok {
			return nil, false
		}
		sum.Add(sum, v)
	}
	ev.usd = sum
	return sum, true
}

// containsAddress reports whether list (policy addresses as written, checked by
// policy.Parse) holds a, in any case.
func containsAddress(list []string, a common.Address) bool {
	for _, s := range list {
		if common.IsHexAddress(s) && common.HexToAddress(s) == a {
			return true
		}
	}
	return false
}
