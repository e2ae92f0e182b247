// Package engine evaluates a proposed action against an agent's policy and answers a
// terminal verdict (docs/policy.md#check-order). Decoders turn a proposedTx into an Action,
// one per protocol; the twelve checks then run on the Action, in a fixed list. The first
// slice decodes x402 payments (docs/policy.md#payment-actions); a new protocol is a new
// Decoder and new Action fields, not a new API.
package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/actions"
	"github.com/x402gate/x402gate/verdictserver/engine/erc20"
	"github.com/x402gate/x402gate/verdictserver/engine/hyperliquid"
	"github.com/x402gate/x402gate/verdictserver/engine/prices"
	"github.com/x402gate/x402gate/verdictserver/engine/sanctions"
	"github.com/x402gate/x402gate/verdictserver/engine/uniswap"
	"github.com/x402gate/x402gate/verdictserver/engine/x402payment"
	"github.com/x402gate/x402gate/verdictserver/policy"
)

// Input is one action to judge.
type Input struct {
	// Escrow is the agent's wallet (escrowAddress); "self" in recipients.allowed means it.
	Escrow common.Address
	// ProposedTx is the decoded JSON object of the request (numbers as json.Number); it has
	// "protocol" and "chainId".
	ProposedTx map[string]any
	// Metadata is the request's metadata object, or nil.
	Metadata map[string]any
	// ContextLogs is the request's contextLogs object, or nil.
	ContextLogs map[string]any
	// Policy is the agent's active policy, or nil when the agent has none
	// (docs/policy.md#default-deny).
	Policy *policy.Policy
}

// Engine judges actions. Evaluate never returns nil nor a pending verdict; every verdict
// it returns satisfies verdict.Verdict.Consistent and carries the latency it measured.
type Engine interface {
	Evaluate(ctx context.Context, in Input) *verdict.Verdict
}

// DefaultSanctionsTTL is how long a sanctions list counts as fresh (docs/policy.md#data-freshness).
const DefaultSanctionsTTL = 24 * time.Hour

// Deps are what an Evaluator uses besides its Config: data and clients the caller built,
// a clock, and code. None of it is an operator's setting (those are Config, which the
// verdict app's JSON embeds); the zero value works: no sanctions list, the built-in
// stablecoin prices, the wall clock.
type Deps struct {
	// Sanctions is a list already loaded, used instead of loading Config.Sanctions; the
	// file, when set, is still the one LoadSanctions reads again. With neither, the
	// sanctions check is not_checked and trust is medium (docs/policy.md#sanctions-list).
	Sanctions *sanctions.List
	// Prices is the static USD price table, built by the caller (the verdict app builds it
	// from its price lines); default: the built-in stablecoins (USDC on 8453 and 84532 at
	// 1 USD), dated when New runs (docs/policy.md#prices).
	Prices *prices.Table
	// Now is the clock for verdict timestamps and data freshness; default time.Now.
	// Latency is always measured on the monotonic clock.
	Now func() time.Time
	// Decoders are code added to the built-in ones (payment, evm, uniswap, hyperliquid); one
	// for a protocol already known replaces it.
	Decoders []Decoder
	// References is a source of the reference prices of markets (Trade.Market) for
	// execution_price_bound; optional (docs/policy.md#trades).
	References ReferencePrices
	// PriceFeeds is the client of Chainlink-style feeds on chain that price what the static
	// table does not; optional (docs/policy.md#price-feeds).
	PriceFeeds *prices.Feeds
	// SanctionsOracles are the clients of the oracles that screen, beside the list, the
	// addresses of actions on their chain; optional, at most one per chain
	// (docs/policy.md#sanctions-oracle).
	SanctionsOracles []*sanctions.Oracle
	// Contracts are known contracts a Go caller adds to the canonical ones built in: a
	// protocol decoder reads calls only to a contract known on the call's chain; one at the
	// address of a built-in one replaces it. The verdict app adds none
	// (docs/policy.md#known-contracts).
	Contracts []KnownContract
}

// Evaluator is the Engine. It is safe for concurrent use.
type Evaluator struct {
	sanctions atomic.Pointer[sanctions.List]
	file      string
	ttl       time.Duration
	prices    *prices.Table
	now       func() time.Time
	decoders  map[string]Decoder
	refs      ReferencePrices
	feeds     *prices.Feeds
	oracles   map[int64]*sanctions.Oracle
}

var _ Engine = (*Evaluator)(nil)

// New checks cfg and builds an Evaluator on deps, loading cfg.Sanctions when it is set and
// deps gives no list.
func New(cfg Config, deps Deps) (*Evaluator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	e := &Evaluator{file: cfg.Sanctions, ttl: time.Duration(cfg.SanctionsTTL), prices: deps.Prices, now: deps.Now, decoders: map[string]Decoder{}, refs: deps.References}
	if err := e.setData(deps); err != nil {
		return nil, err
	}
	if e.now == nil {
		e.now = time.Now
	}
	if e.ttl <= 0 {
		e.ttl = DefaultSanctionsTTL
	}
	if e.prices == nil {
		t, err := prices.New(e.now())
		if err != nil {
			return nil, err
		}
		e.prices = t
	}
	uni, err := uniswap.NewDecoder(deps.Contracts)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	for _, d := range append([]Decoder{x402payment.Decoder{}, erc20.Decoder{}, uni, hyperliquid.Decoder{}}, deps.Decoders...) {
		if d == nil || d.Protocol() == "" {
			return nil, fmt.Errorf("engine: a decoder without a protocol")
		}
		e.decoders[d.Protocol()] = d
	}
	if deps.Sanctions != nil {
		e.sanctions.Store(deps.Sanctions)
	} else if cfg.Sanctions != "" {
		if err := e.LoadSanctions(); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// LoadSanctions (re)loads Config.Sanctions and swaps it in; on error the current list
// stays.
func (e *Evaluator) LoadSanctions() error {
	if e.file == "" {
		return fmt.Errorf("engine: no sanctions file configured")
	}
	l, err := sanctions.Load(e.file)
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	e.sanctions.Store(l)
	return nil
}

// SetSanctions swaps in a sanctions list (nil: none).
func (e *Evaluator) SetSanctions(l *sanctions.List) { e.sanctions.Store(l) }

// Evaluate judges in against its policy (docs/policy.md#check-order). It never returns nil
// or a pending verdict.
func (e *Evaluator) Evaluate(ctx context.Context, in Input) *verdict.Verdict {
	start := time.Now()
	ev := e.newEvaluation(ctx, in)
	ev.decode(e)
	v := ev.verdict(&verdictBox{})
	v.LatencyMs = time.Since(start).Milliseconds()
	ev.release()
	return v
}

// newEvaluation is the state of one evaluation of in, recycled (evaluations).
func (e *Evaluator) newEvaluation(ctx context.Context, in Input) *evaluation {
	ev := evaluations.Get().(*evaluation)
	if ev.scratch == nil {
		ev.scratch = new(actions.Scratch)
	}
	*ev = evaluation{
		ctx:       ctx,
		feeds:     e.feeds,
		oracles:   e.oracles,
		in:        in,
		sanctions: e.sanctions.Load(),
		ttl:       e.ttl,
		prices:    e.prices,
		now:       e.now().UTC(),
		refs:      e.refs,

		scratch:       ev.scratch,
		sources:       ev.sources,
		cached:        ev.cached,
		pricedAmounts: ev.pricedAmounts,
		degraded:      ev.degraded,
	}
	return ev
}

// Judge is Evaluate for a caller that uses the verdict at once and keeps nothing of it (the
// service's workers encode it and store the bytes): it hands the verdict to use, and once use
// returns, the verdict's memory (its checks, evidence maps and observations) is reused by a
// later Judge. Neither the verdict nor anything it points to may be kept or read after use
// returns; copy what is needed (docs/policy.md#evidence-in-process-evaluate-and-judge).
func (e *Evaluator) Judge(ctx context.Context, in Input, use func(*verdict.Verdict)) {
	v, box := e.hold(ctx, in)
	use(v)
	box.recycle()
}

// Hold is Judge for a caller that keeps the verdict past one call: the verdict is the
// caller's until it calls release, after which its memory is reused (it need not call it:
// the memory is then the collector's).
func (e *Evaluator) Hold(ctx context.Context, in Input) (v *verdict.Verdict, release func()) {
	v, box := e.hold(ctx, in)
	return v, box.recycle
}

// hold evaluates in into a recycled box (boxes), which the caller recycles.
func (e *Evaluator) hold(ctx context.Context, in Input) (*verdict.Verdict, *verdictBox) {
	start := time.Now()
	ev := e.newEvaluation(ctx, in)
	ev.decode(e)
	box := boxes.Get().(*verdictBox)
	ev.box = box
	v := ev.verdict(box)
	v.LatencyMs = time.Since(start).Milliseconds()
	ev.release()
	return v, box
}

// Holder is an Engine that also offers Hold.
type Holder interface {
	Hold(ctx context.Context, in Input) (v *verdict.Verdict, release func())
}

// decode decodes ev's proposedTx, with the contracts its policy adds to the registry.
func (ev *evaluation) decode(e *Evaluator) {
	if p := ev.in.Policy; p != nil && p.Doc != nil {
		ev.scratch.Added = p.Doc.KnownContracts
	}
	ev.act, ev.decodeErr = e.decode(ev.in.ProposedTx, ev.in.Escrow, ev.scratch)
}

// Judger is an Engine that also offers Judge.
type Judger interface {
	Judge(ctx context.Context, in Input, use func(*verdict.Verdict))
}

// evaluations recycles the state of an evaluation (and its lists' arrays): the verdict
// keeps nothing of it (it copies what it reports), so the next Evaluate can reuse it.
var evaluations = sync.Pool{New: func() any { return new(evaluation) }}

// maxRecycled bounds the lists an evaluation keeps for the next one.
const maxRecycled = 16

// release drops what ev refers to and puts it back in evaluations.
func (ev *evaluation) release() {
	keep := func(n int) bool { return n <= maxRecycled }
	clear(ev.sources)
	clear(ev.cached)
	clear(ev.pricedAmounts)
	clear(ev.degraded)
	if ev.scratch != nil {
		ev.scratch.Reset()
	}
	next := evaluation{scratch: ev.scratch}
	if keep(cap(ev.sources)) {
		next.sources = ev.sources[:0]
	}
	if keep(cap(ev.cached)) {
		next.cached = ev.cached[:0]
	}
	if keep(cap(ev.pricedAmounts)) {
		next.pricedAmounts = ev.pricedAmounts[:0]
	}
	if keep(cap(ev.degraded)) {
		next.degraded = ev.degraded[:0]
	}
	*ev = next
	evaluations.Put(ev)
}
