package gate

import "net/http"

// CORS preflights (docs/gate.md#cors-preflights): a browser asks an origin whether a
// cross-origin request may be sent (OPTIONS with Origin and Access-Control-Request-Method)
// before it sends one with a custom header such as PAYMENT-SIGNATURE. The preflight
// carries no payment and cannot carry one, so a gate that charges it keeps every browser
// app on another origin from ever sending its payment.

// What a route does with a CORS preflight (Config.Preflight).
const (
	// PreflightPass sends a preflight to the upstream uncharged (the default), as the
	// reference x402 servers do.
	PreflightPass = "pass"
	// PreflightCharge gates a preflight like any request: it gets the 402 challenge.
	PreflightCharge = "charge"
)

// setPreflight checks Config.Preflight.
func (route *routeConfig) setPreflight(cfg Config) error {
	switch cfg.Preflight {
	case "", PreflightPass:
	case PreflightCharge:
		route.chargePreflight = true
	default:
		return configErr("preflight", "%q is not %s or %s", cfg.Preflight, PreflightPass, PreflightCharge)
	}
	return nil
}

// passPreflight reports whether r is a CORS preflight (OPTIONS with Origin and
// Access-Control-Request-Method, the Fetch standard's CORS-preflight request) that goes to
// the upstream uncharged.
func (g *Gate) passPreflight(r *http.Request) bool {
	return !g.route.chargePreflight && r.Method == http.MethodOptions &&
		r.Header.Get("Origin") != "" && r.Header.Get("Access-Control-Request-Method") != ""
}
