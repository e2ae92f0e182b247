package paygate

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/facilitator/httpapi"
)

func init() {
	caddy.RegisterModule(FacilitatorHandler{})
}

// FacilitatorHandler (http.handlers.x402_facilitator) serves the facilitator HTTP API
// (POST /verify, /settle, /verification/quote; GET /supported, /health) of a bundled
// facilitator under a site. It is a terminal handler: it never calls the next one.
type FacilitatorHandler struct {
	// Facilitator names the bundled facilitator of the x402 app. Default: "default".
	Facilitator string `json:"facilitator,omitempty"`
	// APIKey is FACILITATOR_API_KEY, an {env.*} or {file.*} placeholder expanded in
	// Provision: every route but GET /health requires the x-facilitator-key header with
	// this value. Required: an open API lets anyone make the facilitator pay gas. The
	// value "off" serves an open API deliberately (a preview server), with a warning
	// logged at start.
	APIKey string `json:"api_key,omitempty"`
	// HealthDetail turns on the detailed GET /health (signer, networks, balances).
	// Default: false.
	HealthDetail bool `json:"health_detail,omitempty"`
	// StripPrefix is removed from the path before routing, e.g. "/facilitator".
	// Default: none.
	StripPrefix string `json:"strip_prefix,omitempty"`

	api http.Handler
}

// CaddyModule returns the Caddy module information.
func (FacilitatorHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.x402_facilitator",
		New: func() caddy.Module { return new(FacilitatorHandler) },
	}
}

// Provision finds the bundled facilitator and builds its API handler.
func (f *FacilitatorHandler) Provision(ctx caddy.Context) error {
	appIface, err := ctx.App("x402")
	if err != nil {
		return fmt.Errorf("loading the x402 app: %w", err)
	}
	b, err := appIface.(*App).bundle(f.Facilitator)
	if err != nil {
		return err
	}
	repl := caddy.NewReplacer()
	key := ""
	if f.APIKey == APIKeyOff {
		ctx.Logger().Warn("the facilitator API is open (api_key off): anyone who reaches it can make the facilitator verify and settle, and pay the gas",
			zap.String("facilitator", b.name))
	} else {
		key = resolveSecret(repl, f.APIKey)
	}
	opts := httpapi.HandlerOptions{
		APIKey:         key,
		PathPrefix:     f.StripPrefix,
		Registry:       b.registry,
		PricingURL:     b.pricingURL,
		HealthDetailed: f.HealthDetail,
		Logger:         ctx.Logger(),
	}
	if f.APIKey != APIKeyOff && opts.APIKey == "" {
		// Fail closed: a key placeholder that expands to nothing must not open the API.
		return errors.New("api_key resolved to an empty value")
	}
	if f.HealthDetail {
		opts.HealthInfo = httpapi.ServiceHealthInfo(b.engine)
	}
	f.api = httpapi.NewHandler(b.engine, opts)
	return nil
}

// APIKeyOff is the api_key that serves an open facilitator API on purpose.
const APIKeyOff = "off"

// Validate checks the handler's options; the Caddyfile adapter calls it too.
func (f *FacilitatorHandler) Validate() error {
	switch {
	case f.StripPrefix != "" && !strings.HasPrefix(f.StripPrefix, "/"):
		return &facilitator.ConfigError{Option: "strip_prefix", Err: errors.New("wants a path starting with /")}
	case f.APIKey == "":
		return &facilitator.ConfigError{Option: "api_key", Err: errors.New("is required: without it anyone can make the facilitator settle and pay the gas; write `api_key off` to serve an open API on purpose")}
	case f.APIKey == APIKeyOff:
		return nil
	}
	return placeholderOnly("api_key", f.APIKey)
}

// ServeHTTP serves the facilitator API.
func (f *FacilitatorHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	f.api.ServeHTTP(w, r)
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*FacilitatorHandler)(nil)
	_ caddy.Validator             = (*FacilitatorHandler)(nil)
	_ caddyhttp.MiddlewareHandler = (*FacilitatorHandler)(nil)
)
