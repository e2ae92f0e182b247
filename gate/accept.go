package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/x402"
)

// A route may be paid in several ways (docs/gate.md#several-ways-to-pay): USDC on two
// networks, or two tokens. Each way is one option, one entry of the 402's accepts in both
// versions. A payment is matched exactly (scheme, network, asset, payTo, amount) against
// the option it names, and verified and settled as that option's requirement, on that
// option's network.

// AcceptConfig is one way to pay a route (an `accept { … }` block). An empty field takes
// the value of the same field of Config. It is also the Caddy handler's accept block:
// its JSON is flat, in the Caddyfile's names (network, asset, asset_name, asset_version,
// decimals, symbol, price, pay_to, transfer).
type AcceptConfig struct {
	// Network names the chain, as Config.Network. Default: Config.Network.
	Network string
	// Asset is the token. Default: Config.Asset when Network is Config.Network, else the
	// network's USDC.
	Asset AssetConfig
	// Price is what one request costs in this asset, in ParsePrice's grammar. Default:
	// Config.Price.
	Price string
	// PayTo receives the payment. Default: Config.PayTo.
	PayTo string
	// Transfer is how the asset moves, TransferEIP3009 or TransferPermit2. Default:
	// Config.Transfer.
	Transfer string
}

// acceptJSON is the JSON form of an AcceptConfig.
type acceptJSON struct {
	Network      string `json:"network,omitempty"`
	Asset        string `json:"asset,omitempty"`
	AssetName    string `json:"asset_name,omitempty"`
	AssetVersion string `json:"asset_version,omitempty"`
	Decimals     int    `json:"decimals,omitempty"`
	Symbol       string `json:"symbol,omitempty"`
	Price        string `json:"price,omitempty"`
	PayTo        string `json:"pay_to,omitempty"`
	Transfer     string `json:"transfer,omitempty"`
}

// MarshalJSON writes a in its flat JSON form.
func (a AcceptConfig) MarshalJSON() ([]byte, error) {
	return json.Marshal(acceptJSON{Network: a.Network, Asset: a.Asset.Address, AssetName: a.Asset.Name,
		AssetVersion: a.Asset.Version, Decimals: a.Asset.Decimals, Symbol: a.Asset.Symbol, Price: a.Price, PayTo: a.PayTo, Transfer: a.Transfer})
}

// UnmarshalJSON reads a's flat JSON form; an unknown field is an error, as Caddy's
// strict decoding of a module's config makes it.
func (a *AcceptConfig) UnmarshalJSON(b []byte) error {
	var j acceptJSON
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&j); err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	*a = AcceptConfig{Network: j.Network, Price: j.Price, PayTo: j.PayTo, Transfer: j.Transfer, Asset: AssetConfig{Address: j.Asset,
		Name: j.AssetName, Version: j.AssetVersion, Decimals: j.Decimals, Symbol: j.Symbol}}
	return nil
}

// option is one checked way to pay: the parts of its requirement that do not change per
// request.
type option struct {
	network  x402.Network
	asset    common.Address
	extra    map[string]any
	decimals int
	symbol   string
	payTo    common.Address // zero when unset
	price    *big.Int       // nil when unset
	permit2  bool           // the asset moves by Permit2 (TransferPermit2)
	bound    *boundExtra    // an upto option's extra with its facilitator; nil otherwise
}

// setOption checks one way to pay of the route against reg. Errors are *ConfigError named
// as the Caddyfile names the options.
func (route *routeConfig) setOption(o *option, network string, asset AssetConfig, price, payTo, transfer string, reg *x402.Registry) error {
	permit2, err := route.checkTransfer(transfer)
	if err != nil {
		return err
	}
	o.permit2 = permit2
	if err := o.set(network, asset, price, payTo, reg); err != nil {
		return err
	}
	o.addExtra(route.authorization)
	if route.scheme == SchemeUpto {
		o.bound = new(boundExtra)
	}
	return nil
}

// set checks one way to pay against reg.
func (o *option) set(network string, asset AssetConfig, price, payTo string, reg *x402.Registry) error {
	if network == "" {
		return configErr("network", "is required")
	}
	n, ok := reg.Lookup(network)
	if !ok {
		return configErr("network", "%q is not one of %s", network, strings.Join(reg.Names(), ", "))
	}
	o.network = n
	if err := o.setAsset(asset); err != nil {
		return err
	}
	if payTo != "" {
		a, err := x402.ParseAddress(payTo)
		if err != nil {
			return &ConfigError{Option: "pay_to", Err: err}
		}
		o.payTo = a
	}
	if price != "" {
		p, err := ParsePrice(price, o.decimals, o.symbol)
		if err != nil {
			return &ConfigError{Option: "price", Err: err}
		}
		o.price = p
	}
	return nil
}

// AcceptOption names the setting option of the accept block at index i (from 0) as a
// configuration file spells it: "accept 2/price" for the price of the second block, and
// "accept 2" for the block itself.
func AcceptOption(i int, option string) string {
	name := "accept " + strconv.Itoa(i+1)
	if option == "" {
		return name
	}
	return name + "/" + option
}

// acceptErr renames the *ConfigError of a block's setting after the block.
func acceptErr(i int, err error) error {
	if ce, ok := errors.AsType[*ConfigError](err); ok {
		return &ConfigError{Option: AcceptOption(i, ce.Option), Err: ce.Err}
	}
	return &ConfigError{Option: AcceptOption(i, ""), Err: err}
}

// setAccepts checks every accept block: each is a complete way to pay (network, price and
// payee, from the block or the route), obeys the route's price_min, price_max and
// pay_to_allowed, and can be told apart from the others by a payment of either version.
func (route *routeConfig) setAccepts(cfg Config, reg *x402.Registry) error {
	if cfg.PerRequestPrice || cfg.PerRequestPayTo {
		return configErr("accept", "a price or pay_to that holds placeholders needs a route with one way to pay, not accept blocks")
	}
	for i, a := range cfg.Accepts {
		network, asset, price, payTo, transfer := a.Network, a.Asset, a.Price, a.PayTo, a.Transfer
		if network == "" {
			network = cfg.Network
		}
		if asset == (AssetConfig{}) && (a.Network == "" || a.Network == cfg.Network) {
			asset = cfg.Asset
		}
		if price == "" {
			price = cfg.Price
		}
		if payTo == "" {
			payTo = cfg.PayTo
		}
		if transfer == "" {
			transfer = cfg.Transfer
		}
		o := new(option)
		if err := route.setOption(o, network, asset, price, payTo, transfer, reg); err != nil {
			return acceptErr(i, err)
		}
		switch {
		case o.price == nil:
			return acceptErr(i, configErr("price", "is required (in the block or the route)"))
		case o.payTo == (common.Address{}):
			return acceptErr(i, configErr("pay_to", "is required (in the block or the route)"))
		}
		if err := o.checkBounds(cfg); err != nil {
			return acceptErr(i, err)
		}
		for j, prev := range route.options {
			// A v1 payment names its network, payee and amount but not its asset: two
			// options that differ in the asset alone could not be told apart.
			if prev.network.CAIP2 == o.network.CAIP2 && prev.payTo == o.payTo && prev.price.Cmp(o.price) == 0 {
				return acceptErr(i, fmt.Errorf("pays the same network, payee and amount as %s; an x402 v1 payment does not name its asset, so the two cannot be told apart", AcceptOption(j, "")))
			}
		}
		route.options = append(route.options, o)
	}
	route.option = *route.options[0]
	route.options[0] = &route.option
	return nil
}

// checkBounds applies price_min, price_max and pay_to_allowed to a block's fixed price and
// payee, in the block's own asset.
func (o *option) checkBounds(cfg Config) error {
	for _, b := range []struct {
		name, v string
		below   bool
	}{{"price_min", cfg.PriceMin, true}, {"price_max", cfg.PriceMax, false}} {
		if b.v == "" {
			continue
		}
		bound, err := ParsePrice(b.v, o.decimals, o.symbol)
		if err != nil {
			return &ConfigError{Option: b.name, Err: err}
		}
		if c := o.price.Cmp(bound); (b.below && c < 0) || (!b.below && c > 0) {
			return configErr("price", "%s is outside %s %s", FormatAmount(o.price, o.decimals), b.name, b.v)
		}
	}
	if len(cfg.PayToAllowed) > 0 {
		for _, s := range cfg.PayToAllowed {
			if a, err := x402.ParseAddress(s); err == nil && a == o.payTo {
				return nil
			}
		}
		return configErr("pay_to", "%s is not in pay_to_allowed", o.payTo.Hex())
	}
	return nil
}

// requirement is the option's requirement for one request of route.
func (route *routeConfig) requirement(o *option, price *big.Int, payTo common.Address, resource string) *x402.Requirements {
	return &x402.Requirements{
		Scheme:            route.scheme,
		Network:           o.network.CAIP2,
		Amount:            price,
		Asset:             o.asset,
		PayTo:             payTo,
		MaxTimeoutSeconds: route.timeout,
		Resource: x402.ResourceInfo{
			URL:         resource,
			Description: route.resource.Description,
			MimeType:    route.resource.MimeType,
			ServiceName: route.serviceName,
			Tags:        route.tags,
		},
		OutputSchema: route.resource.OutputSchema,
		Extra:        o.requirementExtra(),
	}
}

// Offers builds every requirement of the route for one request, in the order of the
// 402's accepts: the first is Requirements(ctx, in), the others the further accept blocks.
func (g *Gate) Offers(ctx context.Context, in Input) ([]*x402.Requirements, error) {
	first, err := g.Requirements(ctx, in)
	if err != nil {
		return nil, err
	}
	return g.offersFor(first), nil
}

// offersFor lists the route's requirements beside first, the request's requirement of the
// first option: the others differ from their configuration only in the resource.
func (g *Gate) offersFor(first *x402.Requirements) []*x402.Requirements {
	out := make([]*x402.Requirements, 0, len(g.route.options))
	out = append(out, first)
	for _, o := range g.route.options[1:] {
		out = append(out, g.route.requirement(o, o.price, o.payTo, first.Resource.URL))
	}
	return out
}

// choose picks the offer a payment names: the one it matches exactly, else the first on
// its network (so the refusal names the field that differs), else the first.
func choose(offers []*x402.Requirements, p *x402.Payment) *x402.Requirements {
	for _, r := range offers {
		if r.Matches(p) == nil {
			return r
		}
	}
	for _, r := range offers {
		if r.Network == p.Network {
			return r
		}
	}
	return offers[0]
}

// optionOf is the option a requirement of this route was built from.
func (route *routeConfig) optionOf(req *x402.Requirements) *option {
	for _, o := range route.options {
		if o.network.CAIP2 == req.Network && o.asset == req.Asset {
			return o
		}
	}
	return &route.option
}

// displayOf is how the paywall shows one requirement.
func (g *Gate) displayOf(req *x402.Requirements) display {
	o := g.route.optionOf(req)
	d := display{price: FormatAmount(req.Amount, o.decimals), symbol: o.symbol, network: o.network.Name}
	if o.symbol == "" && o.decimals == 0 {
		d.symbol = "base units"
	}
	return d
}

// firstOffer is the request's requirement of the route's first option, given req, the
// requirement of any option for the same request.
func (g *Gate) firstOffer(req *x402.Requirements) *x402.Requirements {
	o := &g.route.option
	if len(g.route.options) == 1 || (req.Network == o.network.CAIP2 && req.Asset == o.asset && req.PayTo == o.payTo && req.Amount != nil && o.price != nil && req.Amount.Cmp(o.price) == 0) {
		return req
	}
	return g.route.requirement(o, o.price, o.payTo, req.Resource.URL)
}

// setAsset checks the option's token: the network's USDC by default, with its EIP-712
// domain, decimals and symbol; another token needs its EIP-712 domain unless it moves by
// Permit2.
func (o *option) setAsset(a AssetConfig) error {
	usdc := o.network.USDC
	o.asset = usdc.Address
	if a.Address != "" {
		addr, err := x402.ParseAddress(a.Address)
		if err != nil {
			return &ConfigError{Option: "asset", Err: err}
		}
		o.asset = addr
	}
	name, version, decimals, symbol := a.Name, a.Version, a.Decimals, a.Symbol
	if o.asset == usdc.Address {
		if name == "" {
			name = usdc.Name
		}
		if version == "" {
			version = usdc.Version
		}
		if decimals == 0 {
			decimals = usdc.Decimals
		}
		if symbol == "" {
			symbol = usdc.Symbol
		}
	}
	if (name == "" || version == "") && !o.permit2 {
		return configErr("asset", "%s is not the network's default: its EIP-712 asset_name and asset_version are required (or transfer permit2)", o.asset.Hex())
	}
	if decimals < 0 || decimals > x402.MaxDecimals {
		return configErr("decimals", "%d is not in 0..%d", decimals, x402.MaxDecimals)
	}
	o.extra = make(map[string]any, 4)
	if name != "" && version != "" {
		o.extra["name"], o.extra["version"] = name, version
	}
	o.decimals, o.symbol = decimals, symbol
	return nil
}
