package verdictapp

import (
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	caddy.RegisterModule(VerdictAPI{})
}

// VerdictAPI (http.handlers.verdict_api) serves the verdict app's API inside a site, for
// Caddy's TLS, logs and matchers: the public API of docs/verdict-api.md and, under /admin/,
// its admin API. It is a terminal handler. Mount it under a prefix with handle_path.
type VerdictAPI struct {
	handler http.Handler
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
	v.handler = app.(*VerdictApp).svc.handler
	return nil
}

// ServeHTTP serves the verdict API; it never calls next.
func (v *VerdictAPI) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	v.handler.ServeHTTP(w, r)
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*VerdictAPI)(nil)
	_ caddyhttp.MiddlewareHandler = (*VerdictAPI)(nil)
)
