package gate

import (
	"math/big"
	"strings"

	"go.uber.org/zap"
)

// The clients' default caps (docs/gate.md#price-warnings): @x402/fetch 2.x and the Go
// client refuse more than $1 per payment unless their user raises the cap, and
// x402-fetch 1.2.0 more than 0.1 USDC. A price above them is legal, but most agents will
// not pay it; a warning at start says so.
var (
	v2ClientCap = big.NewInt(1_000_000) // 1 USDC in base units (6 decimals)
	v1ClientCap = big.NewInt(100_000)   // 0.1 USDC
)

// warnPrices logs a warning for each way to pay whose price (or price_max) in USDC is
// above what x402 clients pay by default.
func (g *Gate) warnPrices() {
	opts := g.route.options
	if len(opts) == 0 {
		opts = []*option{&g.route.option}
	}
	for _, o := range opts {
		price := o.price
		if price == nil {
			price = g.route.priceMax
		}
		if price == nil || !strings.EqualFold(o.symbol, "USDC") || o.decimals != 6 {
			continue
		}
		fields := []zap.Field{zap.String("network", o.network.CAIP2), zap.String("price", FormatAmount(price, o.decimals)+" USDC")}
		switch {
		case price.Cmp(v2ClientCap) > 0:
			g.log.Warn("x402 price above 1 USDC: x402 v2 clients refuse more than $1 per payment by default, and x402-fetch v1 more than 0.1 USDC", fields...)
		case price.Cmp(v1ClientCap) > 0:
			g.log.Warn("x402 price above 0.1 USDC: x402-fetch v1 clients refuse it by default (v2 clients pay up to $1)", fields...)
		}
	}
}
