package engine

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/evmcall"
	"github.com/x402gate/x402gate/verdictserver/engine/prices"
	"github.com/x402gate/x402gate/verdictserver/engine/sanctions"
)

// The data the checks read beyond the action: USD prices (the static table, then the chain's
// feeds) and the sanctions screening (the list, then the chain's oracle).

// setData keeps the price feeds and indexes the sanctions oracles by chain.
func (e *Evaluator) setData(o Deps) error {
	e.feeds = o.PriceFeeds
	for _, or := range o.SanctionsOracles {
		if or == nil {
			continue
		}
		if e.oracles == nil {
			e.oracles = map[int64]*sanctions.Oracle{}
		}
		if _, dup := e.oracles[or.ChainID()]; dup {
			return fmt.Errorf("engine: a second sanctions oracle for chain %d", or.ChainID())
		}
		e.oracles[or.ChainID()] = or
	}
	return nil
}

// context is the evaluation's context, never nil.
func (ev *evaluation) context() context.Context {
	if ev.ctx == nil {
		return context.Background()
	}
	return ev.ctx
}

// usdOf prices value base units of asset on chainID (docs/policy.md#prices): from the static
// table when it lists the asset, else from the asset's on-chain feed. It records the source
// it used in evidence and dataFreshness. False when neither prices it, or when the feed's
// round is older than its max age or could not be read (docs/policy.md#price-feeds: a stale
// feed prices nothing).
func (ev *evaluation) usdOf(chainID int64, asset common.Address, value *big.Int) (*big.Rat, bool) {
	if value == nil {
		return nil, false
	}
	for _, p := range ev.pricedAmounts {
		if p.chainID == chainID && p.asset == asset && p.value == value {
			return p.usd, true
		}
	}
	v, ok := ev.usdOfUncached(chainID, asset, value)
	if ok {
		ev.pricedAmounts = append(ev.pricedAmounts, pricedAmount{chainID, asset, value, v})
	}
	return v, ok
}

// pricedAmount is an amount usdOf priced in this evaluation: the slippage guard and the
// notional price a swap's input alike. usd is read only.
type pricedAmount struct {
	chainID int64
	asset   common.Address
	value   *big.Int
	usd     *big.Rat
}

func (ev *evaluation) usdOfUncached(chainID int64, asset common.Address, value *big.Int) (*big.Rat, bool) {
	if v, ok := ev.tableUSD(chainID, asset, value); ok {
		ev.source("prices", ev.prices.AsOf(), true)
		return v, true
	}
	if !ev.feeds.Has(chainID, asset) {
		return nil, false
	}
	q, err := ev.feeds.Quote(ev.context(), chainID, asset)
	name := "price-feed:" + strconv.FormatInt(chainID, 10) + ":" + ev.hex(asset)
	switch {
	case errors.Is(err, prices.ErrStale):
		ev.source(name, q.UpdatedAt, false)
		ev.degrade("the price feed of " + ev.hex(asset) + " on chain " + strconv.FormatInt(chainID, 10) + " is stale (last round " + q.UpdatedAt.Format(time.RFC3339) + ")")
		return nil, false
	case err != nil:
		ev.degrade("the price feed of " + ev.hex(asset) + " on chain " + strconv.FormatInt(chainID, 10) + " is unavailable: " + err.Error())
		return nil, false
	}
	ev.source(name, q.UpdatedAt, q.Status == prices.StatusFresh)
	ev.annotate(name, "feed", q.Feed.Hex(), "usd", q.USD.FloatString(8))
	return q.Value(value), true
}

// annotate adds members to the evidence source called name (evidence.sources carries more
// than dataFreshness.sources: docs/policy.md#evidence).
func (ev *evaluation) annotate(name string, kv ...any) {
	ev.annotateWith(name, false, kv)
}

// annotateStable is annotate with kv one shared slice that every evaluation consulting the
// source gives alike (listAnnotations), so its rendering can be cached (renderSources).
func (ev *evaluation) annotateStable(name string, kv []any) {
	ev.annotateWith(name, true, kv)
}

func (ev *evaluation) annotateWith(name string, stable bool, kv []any) {
	for i := range ev.sources {
		if s := &ev.sources[i]; s.name == name {
			if s.extra == nil {
				s.extra = slices.Clip(kv) // kv may be shared (listAnnotations): never append into it
				s.stable = stable
			} else {
				s.extra = append(s.extra, kv...)
				s.stable = false
			}
			return
		}
	}
}

// noneListed is the "listed" of a screening that found nothing.
var noneListed = []string{}

// screenObserved is the sanctions check's observation: the addresses screened and those
// listed, in the order encoding/json writes a map's keys (the JSON of the map it replaces).
type screenObserved struct {
	Listed   []string `json:"listed"`
	Screened []string `json:"screened"`
}

// listAnnotation is what evidence.sources says of a sanctions list, boxed once per list.
type listAnnotation struct {
	list *sanctions.List
	kv   []any
}

var lastList atomic.Pointer[listAnnotation]

// listAnnotations are the members annotate adds to a sanctions list's source: its format
// and entries.
func listAnnotations(l *sanctions.List) []any {
	if a := lastList.Load(); a != nil && a.list == l {
		return a.kv
	}
	a := &listAnnotation{list: l, kv: []any{"format", l.Format(), "entries", l.Len()}}
	lastList.Store(a)
	return a.kv
}

// degrade notes data that could not be had; trust drops to medium (docs/policy.md#trust).
func (ev *evaluation) degrade(note string) {
	if !slices.Contains(ev.degraded, note) {
		ev.degraded = append(ev.degraded, note)
	}
}

// screenAddrs screens addrs against the sanctions list and, when one is configured for the
// action's chain, the sanctions oracle (docs/policy.md#sanctions-list). An oracle that does
// not answer fails the check with data_unavailable: a screening that did not happen never
// passes (docs/policy.md#sanctions-oracle).
func (ev *evaluation) screenAddrs(addrs []common.Address) result {
	l, oracle := ev.sanctions, ev.oracles[ev.act.ChainID]
	if l == nil && oracle == nil {
		return notChecked("no sanctions list is loaded")
	}
	uniq := slices.Clone(addrs)
	slices.SortFunc(uniq, compareAddr)
	uniq = slices.Compact(uniq)
	var listed map[common.Address]bool // made at the first hit
	var on string                      // the names of the list and the oracle, ", " between
	if l != nil {
		ev.source(l.Name(), l.AsOf(), ev.sanctionsFresh())
		ev.annotateStable(l.Name(), listAnnotations(l))
		on = l.Name()
		for _, a := range uniq {
			if l.Contains(a) {
				if listed == nil {
					listed = map[common.Address]bool{}
				}
				listed[a] = true
			}
		}
	}
	if oracle != nil {
		if on != "" {
			on += ", "
		}
		on += oracle.Name()
	}
	exp := prefixed(pNoneOn, on).Box
	if oracle != nil {
		hits, asOf, err := oracle.Screen(ev.context(), uniq)
		switch {
		case err != nil && len(listed) == 0:
			ev.degrade(oracle.Name() + " did not answer")
			return failed(verdict.ReasonDataUnavailable, "the sanctions oracle on chain "+strconv.FormatInt(oracle.ChainID(), 10)+" did not answer: "+err.Error(), "",
				&screenObserved{Listed: []string{}, Screened: ev.sortedHexes(uniq)}, exp)
		case err != nil:
			ev.degrade(oracle.Name() + " did not answer")
		default:
			ev.source(oracle.Name(), asOf, true)
			ev.annotate(oracle.Name(), "chainId", oracle.ChainID(), "address", oracle.Address().Hex())
			ev.oracleScreened = true
			for _, a := range hits {
				if listed == nil {
					listed = map[common.Address]bool{}
				}
				listed[a] = true
			}
		}
	}
	obs := ev.sortedHexes(uniq)
	// The reason names the first listed address in the order the action has them.
	for _, a := range addrs {
		if listed[a] {
			hits := make([]common.Address, 0, len(listed))
			for h := range listed {
				hits = append(hits, h)
			}
			return failed(verdict.ReasonSanctionedAddress, "sanctioned address "+ev.hex(a)+" ("+on+")", "",
				&screenObserved{Listed: ev.sortedHexes(hits), Screened: obs}, exp)
		}
	}
	return passed(prefixed(pNoAddressOn, on).Val, "", &screenObserved{Listed: noneListed, Screened: obs}, exp)
}

// tableUSD prices amount of asset from the table; the native coin and the chain's WETH stand
// in for each other when only one is priced (docs/policy.md#prices).
func (ev *evaluation) tableUSD(chainID int64, asset common.Address, amount *big.Int) (*big.Rat, bool) {
	if v, ok := ev.prices.USD(chainID, asset, amount); ok {
		return v, true
	}
	w, known := evmcall.WrappedNative(chainID)
	switch {
	case !known:
		return nil, false
	case asset == NativeAsset:
		return ev.prices.USD(chainID, w, amount)
	case asset == w:
		return ev.prices.USD(chainID, NativeAsset, amount)
	}
	return nil, false
}
