package verdictapp

import (
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/x402gate/x402gate/console"
)

func init() {
	caddy.RegisterModule(VerdictAPI{})
}

// VerdictAPI (http.handlers.verdict_api) serves the verdict app's API inside a site, for
// Caddy's TLS, logs and matchers: the public API of docs/verdict-api.md and, under /admin/,
// its admin API, and with its console option the operator's console under /console
// (docs/console.md). It is a terminal handler. Mount it under a prefix with handle_path.
type VerdictAPI struct {
	// Console turns on the operator's console under /console (docs/console.md). Default:
	// nil, off, and /console is an unknown route of the API.
	Console *console.Config `json:"console,omitempty"`

	handler http.Handler
	console *console.Console // nil: off
	journal *lazyJournal     // the Payments page's journal; nil: none
}

// CaddyModule returns the Caddy module information.
func (VerdictAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.verdict_api",
		New: func() caddy.Module { return new(VerdictAPI) },
	}
}

// Provision finds the verdict app, which must be configured.
func (v *VerdictAPI) Provision(ctx caddy.Context) error {
	app, err := ctx.AppIfConfigured("verdict")
	if err != nil {
		return fmt.Errorf("verdict_api needs the verdict app (the verdict global option): %w", err)
	}
	svc := app.(*VerdictApp).svc
	v.handler = svc.handler
	if v.Console != nil {
		return v.provisionConsole(svc, ctx.Logger())
	}
	return nil
}

// Cleanup closes the console's journal, if it opened one.
func (v *VerdictAPI) Cleanup() error {
	if v.journal != nil {
		return v.journal.Close()
	}
	return nil
}

// ServeHTTP serves the verdict API; it never calls next.
func (v *VerdictAPI) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	if v.console != nil && console.Under(r.URL.Path) {
		v.console.ServeHTTP(w, r)
		return nil
	}
	v.handler.ServeHTTP(w, r)
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*VerdictAPI)(nil)
	_ caddy.CleanerUpper          = (*VerdictAPI)(nil)
	_ caddyhttp.MiddlewareHandler = (*VerdictAPI)(nil)
)
