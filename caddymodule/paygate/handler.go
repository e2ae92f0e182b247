package paygate

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/facilitator/httpapi"
	"github.com/x402gate/x402gate/gate"
	"github.com/x402gate/x402gate/verdictclient"
	"github.com/x402gate/x402gate/x402"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler is the x402 resource gate (http.handlers.x402): an unpaid request gets a 402
// challenge, a paid one is verified and settled before the next handler runs
// (docs/gate.md#settle-before-proxy). On success it sets {http.x402.payer}, {http.x402.tx},
// {http.x402.amount} and {http.x402.network}; a rejected or failed payment never reaches
// the next handler.
type Handler struct {
	// Price is what one request costs: "0.01", "0.01 USDC", "$0.01" or "10000 base".
	// Placeholders are expanded per request. Required.
	Price string `json:"price,omitempty"`
	// PayTo is the merchant's address. Placeholders are expanded per request. Required.
	PayTo string `json:"pay_to,omitempty"`
	// Network is the chain (v1 name, CAIP-2 id or chain id); it must be one of the
	// facilitator's. Required.
	Network string `json:"network,omitempty"`
	// Asset is the token address. Default: the facilitator network's asset.
	Asset string `json:"asset,omitempty"`
	// AssetName and AssetVersion are the EIP-712 domain of a non-default Asset.
	AssetName    string `json:"asset_name,omitempty"`
	AssetVersion string `json:"asset_version,omitempty"`
	// Decimals and Symbol of a non-default Asset. Default: the network asset's.
	Decimals int    `json:"decimals,omitempty"`
	Symbol   string `json:"symbol,omitempty"`
	// Description says what the payment buys. Default: empty.
	Description string `json:"description,omitempty"`
	// MimeType is the resource's media type. Default: empty.
	MimeType string `json:"mime_type,omitempty"`
	// MaxTimeout is the validity a client gives its authorization. Default: 60s.
	MaxTimeout caddy.Duration `json:"max_timeout,omitempty"`
	// Facilitator names the bundled facilitator of the x402 app. Default: "default",
	// unless FacilitatorURL is set.
	Facilitator string `json:"facilitator,omitempty"`
	// FacilitatorURL is a remote facilitator's base URL. Default: none, the bundled one.
	FacilitatorURL string `json:"facilitator_url,omitempty"`
	// InsecureHTTP lets FacilitatorURL be plain http to a host that is not loopback. Over
	// plain http a network attacker can forge a settlement and read the facilitator key.
	// Default false: https, or http to loopback only.
	InsecureHTTP bool `json:"insecure_http,omitempty"`
	// FacilitatorKey is sent as x-facilitator-key to FacilitatorURL; an {env.*} or
	// {file.*} placeholder, expanded in Provision. Default: none.
	FacilitatorKey string `json:"facilitator_key,omitempty"`
	// Guardian advertises the verdict check; nil is off. Default: off.
	Guardian *gate.VerdictConfig `json:"guardian,omitempty"`
	// PricingURL is the verification fee's pricing service. Default: the bundled
	// facilitator's pricing_url.
	PricingURL string `json:"pricing_url,omitempty"`
	// RetryMax is how often a paid request whose upstream failed may be presented again
	// without a second charge; 0 turns it off. Default: 3.
	RetryMax *int `json:"retry_max,omitempty"`
	// RetryGrace is how long those retries stay available. Default: the authorization's
	// remaining validity.
	RetryGrace caddy.Duration `json:"retry_grace,omitempty"`
	// PriceMin and PriceMax bound a Price that holds placeholders, in Price's grammar; a
	// request price outside them is answered 500 and never proxied. PriceMin is required
	// with a placeholder price. Default: none.
	PriceMin string `json:"price_min,omitempty"`
	PriceMax string `json:"price_max,omitempty"`
	// PayToAllowed lists the payees a PayTo with placeholders may expand to; required
	// with such a PayTo. Default: none.
	PayToAllowed []string `json:"pay_to_allowed,omitempty"`
	// Accepts are the ways to pay the route, each a complete requirement whose
	// empty fields take the values above (docs/gate.md#several-ways-to-pay). Default: none,
	// the fields above are the one way.
	Accepts []gate.AcceptConfig `json:"accepts,omitempty"`
	// PaymentID advertises the x402 v2 payment-identifier extension: optional or
	// required (docs/gate.md#payment-identifier). Default: off.
	PaymentID string `json:"payment_id,omitempty"`
	// Discovery fills the v2 bazaar extension (docs/gate.md#discovery). Default: none.
	Discovery *gate.DiscoveryConfig `json:"discovery,omitempty"`
	// Pass makes one payment buy access for a while (docs/caddy.md#access-passes).
	// Default: nil, every request pays.
	Pass *PassOptions `json:"pass,omitempty"`
	// PassKeys sign and verify passes, {env.*} or {file.*} placeholders expanded in
	// Provision; the first signs, all verify. Required with Pass.
	PassKeys []string `json:"pass_keys,omitempty"`
	// Paths is strict or lenient (docs/caddy.md#path-matching): strict answers a path an
	// upstream could read as another 400 ambiguous_path, before any payment or pass.
	// Default: strict.
	Paths string `json:"paths,omitempty"`
	// Flow is upfront or authorization (docs/gate.md#payment-flows): upfront settles
	// before the next handler runs, authorization after its answer below 400, which is
	// buffered until then. Default: upfront.
	Flow string `json:"flow,omitempty"`
	// Scheme is exact or upto (docs/gate.md#metering): upto charges what the next
	// handler reports in the X402-Cost header, up to Price. Default: exact.
	Scheme string `json:"scheme,omitempty"`
	// Transfer is eip3009 or permit2 (docs/gate.md#permit2): how the asset moves, and the
	// default of each accept block's. Default: eip3009 for exact, permit2 for upto.
	Transfer string `json:"transfer,omitempty"`
	// Unmetered is max or free: what an upto answer without a cost report is charged.
	// Default: max.
	Unmetered string `json:"unmetered,omitempty"`
	// Preflight is pass or charge (docs/gate.md#cors-preflights): pass sends a CORS
	// preflight to the next handler uncharged, charge answers it the 402 challenge.
	// Default: pass.
	Preflight string `json:"preflight,omitempty"`

	gate        *gate.Gate
	log         *zap.Logger
	retryKey    string                  // retryPool key held by a remote-facilitator handler
	reg         *x402.Registry          // the facilitator's networks; nil: the built-in ones
	verdictMode facilitator.VerdictMode // a bundled facilitator's; empty for a remote one
	lines       optionTokens            // where the Caddyfile sets each option
	readiness   *networkReadiness       // a bundled facilitator's networks of this route; nil for a remote one
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.x402",
		New: func() caddy.Module { return new(Handler) },
	}
}

// retryPool shares one in-process payment ledger among the handlers that use a remote
// facilitator, across reloads (bundled facilitators keep theirs in the bundle).
var retryPool = caddy.NewUsagePool()

const memoryRetryKey = "x402.retry/memory"

type memoryRetry struct{ *gate.MemoryLedger }

func (memoryRetry) Destruct() error { return nil }

// gateConfig is h as gate.Config. A price or pay_to that holds placeholders comes with
// each request instead.
func (h *Handler) gateConfig() (gate.Config, error) {
	retryMax, err := gate.RetryMax(h.RetryMax)
	if err != nil {
		return gate.Config{}, err
	}
	cfg := gate.Config{
		Network: h.Network,
		Asset: gate.AssetConfig{Address: h.Asset, Name: h.AssetName, Version: h.AssetVersion,
			Decimals: h.Decimals, Symbol: h.Symbol},
		Resource:          gate.ResourceConfig{Description: h.Description, MimeType: h.MimeType},
		MaxTimeoutSeconds: int(time.Duration(h.MaxTimeout) / time.Second),
		Retry:             gate.RetryConfig{Max: retryMax, Grace: time.Duration(h.RetryGrace)},
		PerRequestPrice:   hasPlaceholder(h.Price),
		PerRequestPayTo:   hasPlaceholder(h.PayTo),
		PriceMin:          h.PriceMin,
		PriceMax:          h.PriceMax,
		PayToAllowed:      h.PayToAllowed,
		Accepts:           h.Accepts,
		PaymentID:         h.PaymentID,
		Discovery:         h.Discovery,
		Pass:              h.passConfig(),
		Paths:             h.Paths,
		Flow:              h.Flow,
		Preflight:         h.Preflight,
		Scheme:            h.Scheme,
		Transfer:          h.Transfer,
		Unmetered:         h.Unmetered,
	}
	if h.MaxTimeout != 0 && cfg.MaxTimeoutSeconds <= 0 {
		return gate.Config{}, &gate.ConfigError{Option: "max_timeout", Err: errors.New("must be at least 1s")}
	}
	if !cfg.PerRequestPrice {
		cfg.Price = h.Price
	}
	if !cfg.PerRequestPayTo {
		cfg.PayTo = h.PayTo
	}
	if g := h.Guardian; g != nil {
		gc := *g
		cfg.Verdict = &gc
	}
	return cfg, nil
}

func hasPlaceholder(s string) bool { return strings.Contains(s, "{") }

// Validate checks the gate's configuration against the networks of its facilitator (the
// built-in ones for a remote facilitator, or before Provision). The Caddyfile adapter
// runs the same checks, so a mistake fails at `caddy adapt` with its line.
func (h *Handler) Validate() error {
	return h.validate(h.reg, h.verdictMode)
}

// validate checks h against reg and, for a bundled facilitator whose mode is known, the
// facilitator's guardian_mode. Errors are *gate.ConfigError or *facilitator.ConfigError.
func (h *Handler) validate(reg *x402.Registry, mode facilitator.VerdictMode) error {
	switch {
	case h.FacilitatorURL != "" && h.Facilitator != "":
		return &gate.ConfigError{Option: "facilitator", Err: errors.New("is either bundled or a url, not both")}
	case h.FacilitatorKey != "" && h.FacilitatorURL == "":
		return &gate.ConfigError{Option: "facilitator_key", Err: errors.New("is only for a remote facilitator url")}
	case h.InsecureHTTP && h.FacilitatorURL == "":
		return &gate.ConfigError{Option: "insecure_http", Err: errors.New("is only for a remote facilitator url")}
	}
	if h.FacilitatorURL != "" {
		if err := httpapi.CheckURL(h.FacilitatorURL, h.InsecureHTTP); err != nil {
			return &gate.ConfigError{Option: "facilitator", Err: err}
		}
	}
	if err := placeholderOnly("facilitator_key", h.FacilitatorKey); err != nil {
		return err
	}
	if err := h.validatePass(); err != nil {
		return err
	}
	cfg, err := h.gateConfig()
	if err != nil {
		return err
	}
	if err := cfg.Validate(reg); err != nil {
		return err
	}
	if g := h.Guardian; g != nil && mode != "" {
		if err := mode.CheckAdvertise(g.Advertise, g.Fee); err != nil {
			return &gate.ConfigError{Option: "guardian", Err: err}
		}
	}
	return nil
}

// Provision finds the facilitator, checks the configuration against it and builds the
// gate.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.log = ctx.Logger()
	if err := registerMetrics(ctx); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	opts := gate.Options{Logger: h.log, ErrorStatus: errorStatus, OnResult: countChallenge,
		OnVerify: observeVerify, OnSettle: observeSettle, OnPass: observePass}
	pricingURL := h.PricingURL
	verify := gate.DefaultVerifyTimeout
	if h.FacilitatorURL != "" {
		if err := h.provisionRemote(&opts); err != nil {
			return err
		}
	} else {
		appIface, err := ctx.App("x402")
		if err != nil {
			return fmt.Errorf("loading the x402 app: %w", err)
		}
		b, err := appIface.(*App).bundle(h.Facilitator)
		if err != nil {
			return err
		}
		h.reg, h.verdictMode, verify = b.served, b.verdictMode, b.verifyTimeout
		h.readiness = &networkReadiness{engine: b.engine, networks: h.routeNetworks(b.served)}
		opts.Facilitator, opts.Registry, opts.Ledger = b.engine.InProcess(), b.registry, b.ledger
		if pricingURL == "" {
			pricingURL = b.pricingURL
		}
	}
	if err := h.Validate(); err != nil {
		return err
	}
	if pricingURL != "" {
		opts.Pricing = verdictclient.Pricing(caddy.NewReplacer().ReplaceKnown(pricingURL, ""), opts.Registry)
	}
	cfg, _ := h.gateConfig() // checked by Validate
	if err := h.resolvePassKeys(&cfg); err != nil {
		return err
	}
	cfg.VerifyTimeout = verify
	if verify > gate.DefaultVerifyTimeout {
		h.log.Debug("x402 verify deadline covers the verdict poll", zap.Duration("verify_timeout", verify)) // every route says it: not at info
	}
	g, err := gate.New(cfg, opts)
	if err != nil {
		return err
	}
	h.gate = g
	return nil
}

// provisionRemote sets opts up for the remote facilitator at FacilitatorURL, with the
// in-process payment ledger that such handlers share.
func (h *Handler) provisionRemote(opts *gate.Options) error {
	key := resolveSecret(caddy.NewReplacer(), h.FacilitatorKey)
	if h.FacilitatorKey != "" && key == "" {
		return errors.New("facilitator_key resolved to an empty value")
	}
	opts.Registry = x402.NewRegistry()
	c, err := httpapi.NewClient(httpapi.ClientConfig{URL: h.FacilitatorURL, APIKey: key, Registry: opts.Registry,
		InsecureHTTP: h.InsecureHTTP})
	if err != nil {
		return err
	}
	opts.Facilitator = c
	v, _, err := retryPool.LoadOrNew(memoryRetryKey, func() (caddy.Destructor, error) {
		return memoryRetry{gate.NewMemoryLedger(0)}, nil
	})
	if err != nil {
		return fmt.Errorf("payment ledger: %w", err)
	}
	h.retryKey = memoryRetryKey
	opts.Ledger = v.(memoryRetry).MemoryLedger
	return nil
}

// Cleanup releases the shared payment ledger.
func (h *Handler) Cleanup() error {
	if h.retryKey == "" {
		return nil
	}
	_, err := retryPool.Delete(h.retryKey)
	h.retryKey = ""
	return err
}

// errorStatus maps a next-handler error to its status: Caddy's HandlerError carries it;
// any other error is Caddy's 500.
func errorStatus(err error) int {
	var he caddyhttp.HandlerError
	if errors.As(err, &he) && he.StatusCode != 0 {
		return he.StatusCode
	}
	return http.StatusInternalServerError
}

// ServeHTTP runs the gate; next runs only for a settled payment. While a network of the
// route is not ready on the bundled facilitator, it answers 503 network_unavailable.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if h.readiness.serveNotReady(w) {
		return nil
	}
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if repl == nil {
		repl = caddy.NewReplacer()
	}
	resource := publicResource(r)
	if resource == "" {
		// HTTP/1.0 without Host: there is no public URL to name in the requirement. A Caddy
		// error, so handle_errors can style it (docs/caddy.md#errors).
		return caddyhttp.Error(http.StatusBadRequest, errMissingHost)
	}
	in := gate.Input{Resource: resource, Header: r.Header, Method: r.Method, RequestURI: originalRequestURI(r)}
	if hasPlaceholder(h.Price) {
		in.Price = repl.ReplaceKnown(h.Price, "")
	}
	if hasPlaceholder(h.PayTo) {
		in.PayTo = repl.ReplaceKnown(h.PayTo, "")
	}
	return h.gate.Serve(w, r, in, func(w http.ResponseWriter, r *http.Request) error {
		if paid, ok := gate.FromContext(r.Context()); ok && (paid.Settlement != nil || paid.Authorized != nil) {
			s := paid.Settlement
			if s == nil {
				s = paid.Authorized // not settled yet: no transaction (docs/caddy.md#flows-and-preflights)
			}
			repl.Set("http.x402.payer", s.Payer)
			repl.Set("http.x402.tx", s.Transaction)
			repl.Set("http.x402.amount", s.Amount)
			repl.Set("http.x402.network", s.Network)
			repl.Set("http.x402.network_name", s.NetworkName)
			repl.Set("http.x402.asset", s.Asset)
			repl.Set("http.x402.retry", paid.Retry)
			repl.Set("http.x402.pass", "")
		}
		if paid, ok := gate.FromContext(r.Context()); ok && paid.Pass != nil {
			setPassPlaceholders(repl, paid.Pass)
		}
		return next.ServeHTTP(w, r)
	})
}

// countChallenge counts the unpaid requests the gate answered with a 402 challenge.
func countChallenge(res *gate.Result) {
	if res.Kind == gate.KindPaymentRequired {
		challengesTotal.Inc()
	}
}

// publicResource is the URL the client asked for: the original request's path (before any
// rewrite or handle_path), with the scheme and host of X-Forwarded-Proto and
// X-Forwarded-Host only when Caddy trusts the peer (the servers' trusted_proxies). It is
// empty when the request names no host.
func publicResource(r *http.Request) string {
	path, rawPath := r.URL.Path, r.URL.RawPath
	if orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok && orig.URL != nil {
		path, rawPath = orig.URL.Path, orig.URL.RawPath
	}
	u := url.URL{Scheme: "http", Host: r.Host, Path: path, RawPath: rawPath}
	if r.TLS != nil {
		u.Scheme = "https"
	}
	if trusted, _ := caddyhttp.GetVar(r.Context(), caddyhttp.TrustedProxyVarKey).(bool); trusted {
		if p := strings.ToLower(firstValue(r.Header.Get("X-Forwarded-Proto"))); p == "http" || p == "https" {
			u.Scheme = p
		}
		if host := firstValue(r.Header.Get("X-Forwarded-Host")); validHost(host) {
			u.Host = host
		}
	}
	if u.Host == "" {
		return ""
	}
	if u.Path == "" {
		u.Path = "/"
	}
	if u.RawPath == "" && u.Path[0] == '/' && unreserved(u.Host, ':') && unreserved(u.Path, '/') {
		return u.Scheme + "://" + u.Host + u.Path // what u.String() gives, without its escaping pass
	}
	return u.String()
}

// unreserved reports whether every byte of s is an unreserved URL character (RFC 3986: letters,
// digits, "-._~") or also: a string that url.URL.String() writes as it is.
func unreserved(s string, also byte) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~' || c == also) {
			return false
		}
	}
	return true
}

// originalRequestURI is the path and query the client asked for, before any rewrite: a
// retry credit is bound to it.
func originalRequestURI(r *http.Request) string {
	if orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok && orig.URL != nil {
		return orig.URL.RequestURI()
	}
	return r.URL.RequestURI()
}

func firstValue(s string) string {
	first, _, _ := strings.Cut(s, ",")
	return strings.TrimSpace(first)
}

// validHost accepts host[:port] and nothing that would change the URL's meaning.
func validHost(h string) bool {
	if h == "" || strings.ContainsAny(h, "/\\?#@ \t") {
		return false
	}
	u, err := url.Parse("http://" + h)
	return err == nil && u.Host == h
}

// errMissingHost is the error of a request without Host; its text starts with the
// machine-readable reason, {http.error.message} in handle_errors.
var errMissingHost = errors.New("missing_host: the request names no host, so no payment requirement can be built")

// Interface guards
var (
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
