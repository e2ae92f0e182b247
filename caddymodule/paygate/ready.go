package paygate

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strconv"

	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/x402"
)

// ReasonNetworkUnavailable is the reason of the 503 a gate answers while a network of its
// route is not ready: the bundled facilitator has not yet checked its RPC endpoint's chain
// id or reconciled its unfinished settlements, or the endpoint serves another chain
// (docs/facilitator.md#start-up).
const ReasonNetworkUnavailable = "network_unavailable"

// networkRetryAfter is the Retry-After, in seconds, of a network_unavailable answer.
const networkRetryAfter = 5

// routeNetworks are the CAIP-2 ids of every network h's route accepts, resolved in reg.
func (h *Handler) routeNetworks(reg *x402.Registry) []string {
	names := []string{h.Network}
	for _, a := range h.Accepts {
		if a.Network != "" {
			names = append(names, a.Network)
		}
	}
	var ids []string
	for _, name := range names {
		if n, ok := reg.Lookup(name); ok {
			ids = append(ids, n.CAIP2)
		}
	}
	return ids
}

// networkReadiness answers whether the networks of a route are ready on a bundled
// facilitator's engine.
type networkReadiness struct {
	engine   *facilitator.Service
	networks []string
}

// notReady returns the first network of the route that is not ready, and its state.
func (n *networkReadiness) notReady() (network, state string, ok bool) {
	if n == nil || n.engine == nil {
		return "", "", false
	}
	for _, id := range n.networks {
		if !n.engine.Ready(id) {
			return id, n.engine.NetworkState(id), true
		}
	}
	return "", "", false
}

// serveNotReady answers 503 network_unavailable with Retry-After when a network of the
// route is not ready, and reports whether it did. Nothing of the request is read: no
// payment, pass or sign-in is looked at before the network can settle.
func (n *networkReadiness) serveNotReady(w http.ResponseWriter) bool {
	network, state, ok := n.notReady()
	if !ok {
		return false
	}
	body, _ := json.Marshal(map[string]any{
		"x402Version": x402.Version1,
		"error":       ReasonNetworkUnavailable,
		"message":     fmt.Sprintf("network %s is not ready (%s); try again later", network, state),
	})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Retry-After", strconv.Itoa(networkRetryAfter))
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(body)
	return true
}

// validating reports whether the config being provisioned is one `caddy validate` (or
// `caddy adapt --validate`) checks: Caddy provisions it through caddy.Validate and never
// starts it. Caddy tells a module nothing of this, so the call stack is read; Provision
// runs on the goroutine that called caddy.Validate. TestValidateFindsWrongChainID (in
// integration) fails if a Caddy upgrade renames it.
func validating() bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if f.Function == "github.com/caddyserver/caddy/v2.Validate" {
			return true
		}
		if !more {
			return false
		}
	}
}
