// Package prices is the static USD price table the verdict engine prices an action's
// notional with (docs/policy.md#prices): per chain and token address, a USD price and the
// token's decimals. USDC on Base and Base Sepolia, the x402 default assets, are built in at
// 1 USD. A Table is immutable and safe for concurrent use.
package prices

import (
	"fmt"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/x402"
)

// Entry configures one token's price.
type Entry struct {
	// ChainID is the token's chain, > 0.
	ChainID int64
	// Asset is the token contract, not the zero address.
	Asset common.Address
	// Symbol names the token in evidence, e.g. "USDC"; optional.
	Symbol string
	// Decimals is the token's decimals, 0..77.
	Decimals int
	// USD is the price of one whole token in USD, a decimal string >= 0 ("1", "0.9998").
	USD string
}

// Price is one token's price.
type Price struct {
	// USD is the price of one whole token.
	USD *big.Rat
	// Decimals is the token's decimals.
	Decimals int
	// Symbol names the token, possibly "".
	Symbol string
}

type key struct {
	chain int64
	asset common.Address
}

// Table is a set of prices and the time it was built (its date in evidence).
type Table struct {
	byKey map[key]Price
	asOf  time.Time
}

// Stablecoins are the built-in entries: USDC on Base (8453) and Base Sepolia (84532) at
// 1 USD with 6 decimals, the x402 default assets.
func Stablecoins() []Entry {
	var out []Entry
	for _, n := range []x402.Network{x402.Base, x402.BaseSepolia} {
		out = append(out, Entry{ChainID: n.ChainID.Int64(), Asset: n.USDC.Address, Symbol: n.USDC.Symbol, Decimals: n.USDC.Decimals, USD: "1"})
	}
	return out
}

// New builds a table from the built-in stablecoins and entries; an entry for the same chain
// and asset as a built-in replaces it. asOf dates the table (the configuration's load time).
func New(asOf time.Time, entries ...Entry) (*Table, error) {
	t := &Table{byKey: map[key]Price{}, asOf: asOf}
	for i, e := range append(Stablecoins(), entries...) {
		if e.ChainID <= 0 {
			return nil, fmt.Errorf("price %d: chain id must be positive", i)
		}
		if e.Asset == (common.Address{}) {
			return nil, fmt.Errorf("price %d: asset is the zero address", i)
		}
		if e.Decimals < 0 || e.Decimals > 77 {
			return nil, fmt.Errorf("price %d: decimals must be 0..77", i)
		}
		usd, ok := new(big.Rat).SetString(e.USD)
		if !ok || usd.Sign() < 0 {
			return nil, fmt.Errorf("price %d: usd must be a decimal number >= 0", i)
		}
		t.byKey[key{e.ChainID, e.Asset}] = Price{USD: usd, Decimals: e.Decimals, Symbol: e.Symbol}
	}
	return t, nil
}

// AsOf is when the table was built.
func (t *Table) AsOf() time.Time { return t.asOf }

// Lookup returns the price of asset on chain.
func (t *Table) Lookup(chainID int64, asset common.Address) (Price, bool) {
	if t == nil {
		return Price{}, false
	}
	p, ok := t.byKey[key{chainID, asset}]
	return p, ok
}

// USD returns amount base units of asset in USD, exactly, or false when there is no price.
func (t *Table) USD(chainID int64, asset common.Address, amount *big.Int) (*big.Rat, bool) {
	p, ok := t.Lookup(chainID, asset)
	if !ok || amount == nil {
		return nil, false
	}
	return p.Value(amount), true
}

// Value returns amount base units of the token in USD, exactly.
func (p Price) Value(amount *big.Int) *big.Rat {
	// amount × USD / 10^decimals as one fraction, reduced once.
	num := new(big.Int).Mul(amount, p.USD.Num())
	den := pow10(p.Decimals)
	if !p.USD.IsInt() {
		den = new(big.Int).Mul(den, p.USD.Denom())
	}
	return new(big.Rat).SetFrac(num, den)
}

// pow10s are 10^0 … 10^77, the scales of the decimals a Table accepts; read only.
var pow10s = func() []*big.Int {
	out := make([]*big.Int, 78)
	for i := range out {
		out[i] = new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(i)), nil)
	}
	return out
}()

// pow10 is 10^d; the caller must not modify it.
func pow10(d int) *big.Int {
	if d >= 0 && d < len(pow10s) {
		return pow10s[d]
	}
	return new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(d)), nil)
}
