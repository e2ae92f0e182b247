package gate

import (
	"context"
	"fmt"
	"maps"
	"sync/atomic"

	"github.com/x402gate/x402gate/x402"
)

// Ways an asset moves and schemes a route charges in (docs/gate.md#permit2, docs/gate.md#metering).
// A route charges a fixed price in the exact scheme, by EIP-3009 (tokens that implement
// transferWithAuthorization, such as USDC) or by Permit2 (any ERC-20 whose holder gave
// Permit2 an allowance once); or it meters in the upto scheme: the client signs a Permit2
// authorization for the route's price as a maximum, and the gate settles what the upstream
// reports the answer cost.

// Schemes of a route (Config.Scheme).
const (
	// SchemeExact charges the route's price (the default).
	SchemeExact = x402.SchemeExact
	// SchemeUpto charges what the upstream reports, up to the route's price
	// (docs/gate.md#metering). It moves the asset by Permit2 and always uses the
	// authorization flow.
	SchemeUpto = x402.SchemeUpto
)

// How the asset moves (Config.Transfer, AcceptConfig.Transfer).
const (
	// TransferEIP3009 signs an EIP-3009 transferWithAuthorization of the token itself
	// (the default of the exact scheme).
	TransferEIP3009 = x402.TransferEIP3009
	// TransferPermit2 signs a Permit2 transfer through the x402 Permit2 proxy: any ERC-20
	// whose holder approved the canonical Permit2 contract once. It is advertised as
	// extra.assetTransferMethod "permit2", as the reference servers do.
	TransferPermit2 = x402.TransferPermit2
)

// What an upto answer without a cost report is charged (Config.Unmetered).
const (
	// UnmeteredMax charges the route's maximum, as the reference servers do (the default).
	UnmeteredMax = "max"
	// UnmeteredFree charges nothing.
	UnmeteredFree = "free"
)

// setScheme checks Config.Scheme and Config.Unmetered. It runs before setFlow: an upto
// route settles after its answer, whatever Flow says, and says so when Flow says otherwise.
func (route *routeConfig) setScheme(cfg Config) error {
	switch cfg.Scheme {
	case "", SchemeExact:
		route.scheme = SchemeExact
		if cfg.Unmetered != "" {
			return configErr("unmetered", "is for scheme %s only: an exact route charges its price", SchemeUpto)
		}
		return nil
	case SchemeUpto:
		route.scheme = SchemeUpto
	default:
		return configErr("scheme", "%q is not %s or %s", cfg.Scheme, SchemeExact, SchemeUpto)
	}
	switch cfg.Flow {
	case "", FlowAuthorization:
	default:
		return configErr("flow", "%s does not combine with scheme %s: a metered payment is settled after the answer reports its cost", cfg.Flow, SchemeUpto)
	}
	switch cfg.Unmetered {
	case "", UnmeteredMax:
	case UnmeteredFree:
		route.unmeteredFree = true
	default:
		return configErr("unmetered", "%q is not %s or %s", cfg.Unmetered, UnmeteredMax, UnmeteredFree)
	}
	return nil
}

// checkTransfer checks a transfer option against the route's scheme: upto is Permit2 only.
func (route *routeConfig) checkTransfer(transfer string) (permit2 bool, err error) {
	switch transfer {
	case "":
		return route.scheme == SchemeUpto, nil
	case TransferPermit2:
		return true, nil
	case TransferEIP3009:
		if route.scheme == SchemeUpto {
			return false, configErr("transfer", "%s does not combine with scheme %s, which moves the asset by %s", TransferEIP3009, SchemeUpto, TransferPermit2)
		}
		return false, nil
	}
	return false, configErr("transfer", "%q is not %s or %s", transfer, TransferEIP3009, TransferPermit2)
}

// addExtra completes the option's extra, which holds the token's EIP-712 domain when it is
// known: the transfer method of a Permit2 option, and the payment flow when it is not the
// reference's default, authorization (docs/gate.md#payment-flows).
func (o *option) addExtra(authorization bool) {
	if o.permit2 {
		o.extra[x402.ExtraAssetTransferMethod] = TransferPermit2
	}
	if !authorization {
		o.extra[x402.ExtraPaymentFlow] = FlowUpfront
	}
}

// boundExtra holds the extra of an upto option once the facilitator's address is known.
type boundExtra = atomic.Pointer[map[string]any]

// requirementExtra is the extra of the option's requirements: on an upto route, with the
// facilitator's address once bindFacilitator has read it.
func (o *option) requirementExtra() map[string]any {
	if o.bound != nil {
		if e := o.bound.Load(); e != nil {
			return *e
		}
	}
	return o.extra
}

// bindFacilitator reads, once, the address of the facilitator that settles upto on each
// network of an upto route, from its /supported (extra.facilitatorAddress): the client
// binds it in the authorization it signs, as the only account that may settle it. An
// error means the facilitator could not be asked or does not settle upto there.
func (g *Gate) bindFacilitator(ctx context.Context) error {
	if g.route.scheme != SchemeUpto || g.route.option.bound.Load() != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, g.verifyTimeout)
	defer cancel()
	s, err := g.f.Supported(ctx)
	if err != nil {
		return fmt.Errorf("gate: facilitator /supported: %w", err)
	}
	return g.storeFacilitators(s)
}

// storeFacilitators binds the facilitator's address of each network of an upto route from
// its /supported answer s, or says which network it does not settle upto on.
func (g *Gate) storeFacilitators(s x402.SupportedResponse) error {
	extras := make([]map[string]any, len(g.route.options))
	for i, o := range g.route.options {
		addr, ok := uptoFacilitator(s, o.network.CAIP2)
		if !ok {
			return fmt.Errorf("gate: the facilitator does not settle %s on %s (no extra.facilitatorAddress in its /supported)", SchemeUpto, o.network.CAIP2)
		}
		extras[i] = maps.Clone(o.extra)
		extras[i][x402.ExtraFacilitatorAddress] = addr
	}
	for i, o := range g.route.options {
		o.bound.Store(&extras[i])
	}
	return nil
}

// uptoFacilitator finds the facilitator address of the v2 upto kind of network in s.
func uptoFacilitator(s x402.SupportedResponse, network string) (string, bool) {
	for _, k := range s.Kinds {
		if k.X402Version != x402.Version2 || k.Scheme != SchemeUpto || k.Network != network {
			continue
		}
		v, _ := k.Extra[x402.ExtraFacilitatorAddress].(string)
		if a, err := x402.ParseAddress(v); err == nil {
			return a.Hex(), true
		}
	}
	return "", false
}
