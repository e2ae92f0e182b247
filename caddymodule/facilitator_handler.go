package caddymodule

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

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
	// Provision. When set, every route but GET /health requires the x-facilitator-key
	// header with this value. Default: none, the API is open.
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
	opts := httpapi.HandlerOptions{
		APIKey:         resolveSecret(repl, f.APIKey),
		PathPrefix:     f.StripPrefix,
		Registry:       b.registry,
		PricingURL:     b.pricingURL,
		HealthDetailed: f.HealthDetail,
		Logger:         ctx.Logger(),
	}
	if f.APIKey != "" && opts.APIKey == "" {
		// Fail closed: a key placeholder that expands to nothing must not open the API.
		return errors.New("api_key resolved to an empty value")
	}
	if f.HealthDetail {
		opts.HealthInfo = httpapi.EngineHealthInfo(b.engine)
	}
	f.api = httpapi.NewHandler(b.engine, opts)
	return nil
}

// Validate checks the handler's options; the Caddyfile adapter calls it too.
func (f *FacilitatorHandler) Validate() error {
	if f.StripPrefix != "" && !strings.HasPrefix(f.StripPrefix, "/") {
		return &facilitator.SettingsError{Option: "strip_prefix", Err: errors.New("wants a path starting with /")}
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
