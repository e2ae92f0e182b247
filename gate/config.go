package gate

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/gate/setting"
	"github.com/x402gate/x402gate/x402"
)

// Defaults of Config.
const (
	// DefaultMaxTimeoutSeconds is the maxTimeoutSeconds advertised when Config leaves it
	// unset, as x402-express does (docs/protocol.md#requirements).
	DefaultMaxTimeoutSeconds = 60
	// DefaultRetryMax is how many times a paid request whose upstream failed may be
	// presented again without a second charge.
	DefaultRetryMax = 3
	// DefaultVerifyTimeout bounds one facilitator /verify call.
	DefaultVerifyTimeout = 30 * time.Second
	// DefaultSettleTimeout bounds one facilitator /settle call, receipt wait included.
	DefaultSettleTimeout = 60 * time.Second
	// DefaultRetryLease is how long an attempt holds its payment's record unless it
	// renews it; the live holder renews it every third of it, so a dead holder's lapses
	// within seconds.
	DefaultRetryLease = 6 * time.Second
	// MinRetryLease is the shortest RetryConfig.Lease: a shorter one lapses between
	// renewals under ordinary network and scheduling delays, cancelling healthy attempts.
	MinRetryLease = time.Second
	// DefaultPricingTimeout bounds one pricing fetch for the verification fee.
	DefaultPricingTimeout = 5 * time.Second
)

// Verdict advertise modes (docs/gate.md#configuration guardian.advertise).
const (
	AdvertiseRequired = "required"
	AdvertiseOptional = "optional"
)

// Config is the spec's ResourceGateConfig (docs/gate.md#results): what a route charges, where the
// money goes, and how the facilitator and the verdict service are reached. The JSON names
// are the spec's keys.
type Config struct {
	// Network names the chain: a v1 name ("base-sepolia"), a CAIP-2 id ("eip155:84532") or
	// a chain id ("84532"). It must be in Options.Registry. Required.
	Network string `json:"network"`
	// Asset is the token paid with. Default: the network's USDC (x402.Network.USDC).
	Asset AssetConfig `json:"asset,omitempty"`
	// PayTo is the merchant's address that receives the payment. Required, unless every
	// request brings Input.PayTo.
	PayTo string `json:"payTo,omitempty"`
	// Price is what one request costs, in ParsePrice's grammar ("0.01", "0.01 USDC",
	// "$0.01", "10000 base"). Required, unless every request brings Input.Price.
	Price string `json:"price,omitempty"`
	// Resource is the resource metadata advertised with each requirement.
	Resource ResourceConfig `json:"resource,omitempty"`
	// MaxTimeoutSeconds is the validity a client gives its authorization. Default
	// DefaultMaxTimeoutSeconds.
	MaxTimeoutSeconds int `json:"maxTimeoutSeconds,omitempty"`
	// Verdict is the verdict-service setting, the spec's guardian object: nil is the spec's
	// "off". Default: nil.
	Verdict *VerdictConfig `json:"guardian,omitempty"`
	// Retry lets a paid request whose upstream failed be presented again.
	Retry RetryConfig `json:"retry,omitempty"`
	// Accepts are several ways to pay the route (docs/gate.md#several-ways-to-pay): each
	// is one requirement of the 402, and Network, Asset, Price and PayTo above are only
	// the defaults of its fields. Default: none, and Network, Asset, Price and PayTo are
	// the route's one way to pay.
	Accepts []AcceptConfig `json:"accepts,omitempty"`
	// PaymentID is the x402 v2 payment-identifier extension (docs/gate.md#payment-identifier):
	// PaymentIDOptional or PaymentIDRequired. Default: empty, not advertised.
	PaymentID string `json:"paymentId,omitempty"`
	// Discovery fills the v2 bazaar extension of the 402 (docs/gate.md#discovery).
	// Default: nil, the route is not described for discovery services.
	Discovery *DiscoveryConfig `json:"discovery,omitempty"`
	// Pass makes one payment buy access for a while (docs/gate.md#access-passes).
	// Default: none.
	Pass PassConfig `json:"pass,omitempty"`
	// Paths is how the route treats a path an upstream could read as another
	// (docs/gate.md#ambiguous-paths): PathsStrict answers it 400 ambiguous_path before any
	// payment or pass is looked at, PathsLenient lets it through. Default: strict.
	Paths string `json:"paths,omitempty"`
	// Flow is when the payment is settled (docs/gate.md#payment-flows): FlowUpfront before
	// the upstream runs, FlowAuthorization after its good answer. Default: upfront.
	Flow string `json:"flow,omitempty"`
	// Scheme is SchemeExact, a fixed Price, or SchemeUpto, a metered payment whose Price
	// is the most one request may cost: the upstream reports the cost of its answer, and
	// the gate settles that (docs/gate.md#metering). Default: exact.
	Scheme string `json:"scheme,omitempty"`
	// Transfer is how the asset moves: TransferEIP3009 or TransferPermit2
	// (docs/gate.md#permit2). It is the default of each accept block's. Default: eip3009
	// for exact, permit2 for upto (its only one).
	Transfer string `json:"transfer,omitempty"`
	// Unmetered is what an upto answer without a cost report is charged: UnmeteredMax or
	// UnmeteredFree. Default: max.
	Unmetered string `json:"unmetered,omitempty"`
	// Preflight is what a CORS preflight gets (docs/gate.md#cors-preflights):
	// PreflightPass sends it to the upstream uncharged, PreflightCharge gates it like any
	// request. Default: pass.
	Preflight string `json:"preflight,omitempty"`
	// VerifyTimeout bounds a /verify call. Default DefaultVerifyTimeout.
	VerifyTimeout time.Duration `json:"verifyTimeout,omitempty"`
	// SettleTimeout bounds a /settle call. Settlement is not cancelled when the client goes
	// away, only by this bound. Default DefaultSettleTimeout.
	SettleTimeout time.Duration `json:"settleTimeout,omitempty"`
	// PricingTimeout bounds a fetch of the verification fee. Default DefaultPricingTimeout.
	PricingTimeout time.Duration `json:"pricingTimeout,omitempty"`
	// PriceMin and PriceMax bound a price that a request brings (Input.Price), in
	// ParsePrice's grammar. A per-request price comes from a placeholder that a client
	// may be able to influence, so PriceMin is required with PerRequestPrice, and a
	// request price outside the bounds is refused (500 invalid_payment_requirements,
	// nothing proxied). Default: none; then Input.Price is refused.
	PriceMin string `json:"priceMin,omitempty"`
	PriceMax string `json:"priceMax,omitempty"`
	// PayToAllowed lists the payees a request may bring (Input.PayTo); required with
	// PerRequestPayTo, so a client can never make the route pay itself. Default: none;
	// then Input.PayTo is refused.
	PayToAllowed []string `json:"payToAllowed,omitempty"`
	// PerRequestPrice and PerRequestPayTo say that every request brings its price or payee
	// in Input, so Validate does not require Price or PayTo, but requires PriceMin or
	// PayToAllowed. Default false.
	PerRequestPrice bool `json:"-"`
	PerRequestPayTo bool `json:"-"`
}

// AssetConfig is the token a route is paid in, with its EIP-712 domain.
type AssetConfig struct {
	// Address is the token contract. Default: the network's USDC.
	Address string `json:"address,omitempty"`
	// Name and Version are the token's EIP-712 domain, sent as extra {name, version}.
	// Default: the network's USDC domain when Address is the network's USDC; required
	// otherwise.
	Name    string `json:"name,omitempty"`
	Version string `json:"version,omitempty"`
	// Decimals scales human prices. Default: the network's USDC decimals (6) when Address
	// is the network's USDC; otherwise 0 and only "<n> base" prices parse.
	Decimals int `json:"decimals,omitempty"`
	// Symbol is shown on the paywall and accepted as a price unit. Default: the network's
	// USDC symbol when Address is the network's USDC.
	Symbol string `json:"symbol,omitempty"`
}

// ResourceConfig is the resource metadata of a requirement (v1 description, mimeType and
// outputSchema; v2 resource.description and resource.mimeType).
type ResourceConfig struct {
	// Description says what the payment buys. Default: empty.
	Description string `json:"description,omitempty"`
	// MimeType is the resource's media type. Default: empty (x402-fetch requires a string,
	// and "" passes).
	MimeType string `json:"mimeType,omitempty"`
	// OutputSchema is v1's optional outputSchema object. Default: nil, omitted (a null
	// fails x402-fetch's schema).
	OutputSchema map[string]any `json:"outputSchema,omitempty"`
}

// VerdictConfig is the spec's guardian object {advertise?, fee?} (docs/gate.md#results):
// whether a route advertises the verdict check and charges its fee.
type VerdictConfig struct {
	// Advertise is AdvertiseRequired or AdvertiseOptional: the 402 answer carries a
	// "verification" section. Required sends the fee requirement with every /verify;
	// optional only when the client sent a fee payment. Default: empty, nothing is
	// advertised (the facilitator's GUARDIAN_MODE still applies).
	Advertise string `json:"advertise,omitempty"`
	// Fee turns on the verification fee, priced per requirement by Options.Pricing.
	// Default false.
	Fee bool `json:"fee,omitempty"`
}

// RetryConfig bounds how a paid request whose upstream failed (status >= 500, a
// connection failure or a panic) may be presented again without a second charge: the
// same payment header together with the retry token of the failed answer
// (HeaderPaymentRetry).
type RetryConfig struct {
	// Max is how many times the same payment header, with its retry token, may reach the
	// upstream again. Default
	// DefaultRetryMax; a negative value turns retries off.
	Max int `json:"max,omitempty"`
	// Grace is how long the retries stay available. Default and upper bound: the
	// authorization's remaining validity (validBefore - now), after which the facilitator
	// refuses the header anyway.
	Grace time.Duration `json:"grace,omitempty"`
	// Lease is how long an attempt holds its payment's record (docs/gate.md#payment-ledger):
	// no other attempt of the payment gets through meanwhile. The holder renews it every
	// third of it until the upstream answers; this bound only matters when an instance
	// dies mid-attempt. Default DefaultRetryLease; at least MinRetryLease.
	Lease time.Duration `json:"lease,omitempty"`
}

// PricingFunc fetches the verification fee requirement for a merchant requirement (the
// spec's fetchVerificationRequirements, docs/gate.md#results). It returns nil when no fee applies.
type PricingFunc func(ctx context.Context, merchant *x402.Requirements) (*x402.Requirements, error)

// Options are the gate's dependencies.
type Options struct {
	// Facilitator verifies and settles: the in-process engine, or a remote facilitator's
	// client (facilitator/httpapi). Required.
	Facilitator Facilitator
	// Registry resolves Config.Network and decodes payment headers. It must be the
	// facilitator's, so a locally configured chain resolves. Default: the built-in networks.
	Registry *x402.Registry
	// Pricing fetches the verification fee. Required when Verdict.Fee is set.
	Pricing PricingFunc
	// Ledger is the payment ledger (docs/gate.md#payment-ledger): retry credits, payment
	// identifiers and pending settlements of every payment. Default: an in-process
	// MemoryLedger. Several instances behind one load balancer share one
	// (gate/redisretry).
	Ledger Ledger
	// ErrorStatus maps an error returned by the next handler to the status it stands
	// for; a status >= 500 counts as an upstream failure. Default: every error is 502.
	// The Caddy adapter maps caddyhttp.HandlerError to its StatusCode.
	ErrorStatus func(error) int
	// Logger gets payer, reason and transaction fields, never a header or a key. Default:
	// zap.NewNop().
	Logger *zap.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// OnResult, when set, is called by Serve with every result before it is answered or
	// the upstream runs, e.g. to count challenges. It must not modify the result: a
	// cached challenge's result, its Header and Requirements included, is shared by the
	// requests answered from the same cached answer (docs/gate.md#the-cached-challenge).
	// Default nil.
	OnResult func(*Result)
	// OnVerify, when set, is called after every facilitator verification, e.g. to count
	// them. It runs on the request's goroutine and must not block. Default nil.
	OnVerify func(VerifyEvent)
	// OnSettle, when set, is called after every facilitator settlement, and after a
	// metered cost of 0 (SettleEvent.Local when the facilitator was not asked), e.g. to
	// count and time them. It runs on the request's goroutine and must not block. Default nil.
	OnSettle func(SettleEvent)
	// OnPass, when set, is called when an access pass is issued, lets a request in, or is
	// refused (docs/gate.md#access-passes), e.g. to count them. It must not block.
	// Default nil.
	OnPass func(PassEvent)
}

// VerifyEvent is one facilitator verification, as Options.OnVerify sees it.
type VerifyEvent struct {
	// Requirements is what the payment was verified against; it comes from the route's
	// configuration, never from the request.
	Requirements *x402.Requirements
	// Response is the facilitator's answer; Err is set when it gave none.
	Response x402.VerifyResponse
	Err      error
	// Duration is the time of the call.
	Duration time.Duration
}

// SettleEvent is one facilitator settlement, as Options.OnSettle sees it.
type SettleEvent struct {
	// Requirements is what the payment settled against.
	Requirements *x402.Requirements
	// Response is the facilitator's answer; Err is set when it gave none.
	Response x402.SettleResponse
	Err      error
	// Duration is the time of the call, receipt wait included.
	Duration time.Duration
	// Local is a settlement of 0 the gate made without asking the facilitator (a metered
	// cost of 0, docs/gate.md#metering): Duration is 0 and no call was timed.
	Local bool
}

// routeConfig is a checked Config: the parts of every requirement that do not change per
// request.
type routeConfig struct {
	option             // the first way to pay: the only one, or the first accept
	options  []*option // every way to pay, in the order of the 402's accepts
	priceMin *big.Int  // nil: no per-request price is accepted
	priceMax *big.Int  // nil: no upper bound
	payTos   map[common.Address]bool
	resource ResourceConfig
	timeout  int
	verdict  *VerdictConfig
	retryMax int
	grace    time.Duration
	// paymentID is Config.PaymentID; extensions are the v2 extensions of every 402.
	paymentID  string
	extensions map[string]any
	// serviceName and tags describe the route in every v2 resource (Config.Discovery).
	serviceName string
	tags        []string
	// lenientPaths is Config.Paths == PathsLenient.
	lenientPaths bool
	// authorization is Config.Flow == FlowAuthorization, or an upto route; chargePreflight
	// is Config.Preflight == PreflightCharge.
	authorization, chargePreflight bool
	// scheme is SchemeExact or SchemeUpto; unmeteredFree is Config.Unmetered ==
	// UnmeteredFree.
	scheme        string
	unmeteredFree bool
}

// ConfigError is a Config that Validate refuses. Option is the name of the offending
// setting as a configuration file spells it (price, pay_to, network, asset, asset_name,
// decimals, max_timeout, guardian, retry_max, retry_grace, paths, flow, preflight, scheme,
// transfer, unmetered), so an
// adapter can point at the line that sets it (docs/caddy.md). It is setting.Error, which
// gate's subpackages return too.
type ConfigError = setting.Error

func configErr(option string, format string, args ...any) error {
	return setting.Errorf(option, format, args...)
}

// Validate checks cfg without I/O against reg, the networks its facilitator serves (nil:
// the built-in ones). Besides every check of New it requires Price and PayTo, unless
// PerRequestPrice or PerRequestPayTo say each request brings them: a configuration
// file that names no price has a mistake in it, not a free route. Errors are
// *ConfigError (docs/gate.md#configuration).
func (cfg Config) Validate(reg *x402.Registry) error {
	switch {
	case len(cfg.Accepts) > 0:
		// each accept block is checked for its price and payee by checkConfig
	case cfg.Price == "" && !cfg.PerRequestPrice:
		return configErr("price", "is required")
	case cfg.PayTo == "" && !cfg.PerRequestPayTo:
		return configErr("pay_to", "is required")
	case cfg.PerRequestPrice && cfg.PriceMin == "":
		return configErr("price", "holds a placeholder, so price_min is required: a per-request price must be bounded, or a client could set its own")
	case cfg.PerRequestPayTo && len(cfg.PayToAllowed) == 0:
		return configErr("pay_to", "holds a placeholder, so pay_to_allowed is required: list the payees a request may name, or a client could pay itself")
	}
	if reg == nil {
		reg = x402.NewRegistry()
	}
	_, err := checkConfig(cfg, reg)
	return err
}

// RetryMax is RetryConfig.Max for a configured retry_max, where nil leaves the default
// and 0 turns retries off (docs/gate.md#retries).
func RetryMax(configured *int) (int, error) {
	switch {
	case configured == nil:
		return 0, nil
	case *configured < 0:
		return 0, configErr("retry_max", "%d must not be negative (0 turns retries off)", *configured)
	case *configured == 0:
		return -1, nil
	}
	return *configured, nil
}

// checkConfig validates cfg against reg and fills in defaults. Its errors are
// *ConfigError.
func checkConfig(cfg Config, reg *x402.Registry) (*routeConfig, error) {
	route := &routeConfig{resource: cfg.Resource, timeout: cfg.MaxTimeoutSeconds}
	if err := route.setScheme(cfg); err != nil {
		return nil, err
	}
	if err := route.setFlow(cfg); err != nil {
		return nil, err
	}
	if len(cfg.Accepts) > 0 {
		if err := route.setAccepts(cfg, reg); err != nil {
			return nil, err
		}
	} else {
		if err := route.setOption(&route.option, cfg.Network, cfg.Asset, cfg.Price, cfg.PayTo, cfg.Transfer, reg); err != nil {
			return nil, err
		}
		route.options = []*option{&route.option}
	}
	if err := route.setBounds(cfg); err != nil {
		return nil, err
	}
	switch {
	case route.timeout == 0:
		route.timeout = DefaultMaxTimeoutSeconds
	case route.timeout < 0:
		return nil, configErr("max_timeout", "%ds must be positive", route.timeout)
	}
	if g := cfg.Verdict; g != nil {
		switch g.Advertise {
		case "", AdvertiseRequired, AdvertiseOptional:
		default:
			return nil, configErr("guardian", "advertise %q is not %s or %s", g.Advertise, AdvertiseRequired, AdvertiseOptional)
		}
		gc := *g
		route.verdict = &gc
	}
	route.retryMax = cfg.Retry.Max
	if route.retryMax == 0 {
		route.retryMax = DefaultRetryMax
	}
	if cfg.Retry.Grace < 0 {
		return nil, configErr("retry_grace", "must not be negative")
	}
	route.grace = cfg.Retry.Grace
	if cfg.Retry.Lease != 0 && cfg.Retry.Lease < MinRetryLease {
		return nil, configErr("retry_lease", "%s is shorter than the minimum %s (0 means the default %s)", cfg.Retry.Lease, MinRetryLease, DefaultRetryLease)
	}
	if err := route.setExtensions(cfg); err != nil {
		return nil, err
	}
	if err := cfg.Pass.Validate(); err != nil {
		return nil, err
	}
	if err := route.setPreflight(cfg); err != nil {
		return nil, err
	}
	switch cfg.Paths {
	case "", PathsStrict:
	case PathsLenient:
		route.lenientPaths = true
	default:
		return nil, configErr("paths", "%q is not %s or %s", cfg.Paths, PathsStrict, PathsLenient)
	}
	return route, nil
}

// setBounds checks the bounds of per-request prices and payees.
func (route *routeConfig) setBounds(cfg Config) error {
	for _, b := range []struct {
		option, v string
		dst       **big.Int
	}{{"price_min", cfg.PriceMin, &route.priceMin}, {"price_max", cfg.PriceMax, &route.priceMax}} {
		if b.v == "" {
			continue
		}
		p, err := ParsePrice(b.v, route.decimals, route.symbol)
		if err != nil {
			return &ConfigError{Option: b.option, Err: err}
		}
		*b.dst = p
	}
	switch {
	case route.priceMax != nil && route.priceMin == nil:
		return configErr("price_max", "needs price_min")
	case route.priceMax != nil && route.priceMax.Cmp(route.priceMin) < 0:
		return configErr("price_max", "%s is below price_min %s", cfg.PriceMax, cfg.PriceMin)
	}
	for _, s := range cfg.PayToAllowed {
		a, err := x402.ParseAddress(s)
		if err != nil {
			return &ConfigError{Option: "pay_to_allowed", Err: err}
		}
		if route.payTos == nil {
			route.payTos = map[common.Address]bool{}
		}
		route.payTos[a] = true
	}
	return nil
}

// requestPrice parses a price a request brings and checks it against the bounds.
func (route *routeConfig) requestPrice(s string) (*big.Int, error) {
	if route.priceMin == nil {
		return nil, errors.New("gate: a per-request price needs price_min")
	}
	p, err := ParsePrice(s, route.decimals, route.symbol)
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	if p.Cmp(route.priceMin) < 0 || (route.priceMax != nil && p.Cmp(route.priceMax) > 0) {
		return nil, fmt.Errorf("gate: the request's price %s is outside [price_min, price_max]", p)
	}
	return p, nil
}

// requestPayTo parses a payee a request brings and checks it against the allow-list.
func (route *routeConfig) requestPayTo(s string) (common.Address, error) {
	a, err := x402.ParseAddress(s)
	if err != nil {
		return common.Address{}, fmt.Errorf("gate: pay_to: %w", err)
	}
	if !route.payTos[a] {
		return common.Address{}, fmt.Errorf("gate: the request's payee %s is not in pay_to_allowed", a.Hex())
	}
	return a, nil
}
