package gate

import (
	"context"
	"net/http"
	"strings"

	"github.com/ethereum/go-ethereum/common"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/gate/pass"
)

// Sign-in-with-x (docs/gate.md#sign-in-with-x) lets a wallet that bought a pass in again
// without the pass itself: the 402 of a route with passes carries the x402 v2
// "sign-in-with-x" extension (a challenge bound to this origin), the client signs the
// EIP-4361 message it describes with its wallet (EIP-191) and sends it back in the
// SIGN-IN-WITH-X header, and the gate lets the signer in while a pass it paid for covers
// the request. That needs memory: the pass book records, per issuing key, host, scope and
// payer, until when a pass runs, and which challenge nonces were used. It lives in the retry store's
// backend (memory, or Redis for a fleet).

// HeaderSignInWithX carries a sign-in-with-x proof (pass.HeaderSignInWithX).
const HeaderSignInWithX = pass.HeaderSignInWithX

// SignInWithX is the extension's key in PAYMENT-REQUIRED extensions (pass.SignInWithX).
const SignInWithX = pass.SignInWithX

// Sign-in-with-x refusals (HeaderPassRefused), the reference's codes where it has one.
const (
	SIWXMalformed      = pass.SIWXMalformed
	SIWXDomainMismatch = pass.SIWXDomainMismatch
	SIWXURIMismatch    = pass.SIWXURIMismatch
	SIWXIssuedAt       = pass.SIWXIssuedAt
	SIWXTooOld         = pass.SIWXTooOld
	SIWXInFuture       = pass.SIWXInFuture
	SIWXExpired        = pass.SIWXExpired
	SIWXNotYetValid    = pass.SIWXNotYetValid
	SIWXNonce          = pass.SIWXNonce
	SIWXChainID        = pass.SIWXChainID
	SIWXSignature      = pass.SIWXSignature
	// SIWXNoPass: the proof is good, but the signer holds no live pass for this scope.
	SIWXNoPass = pass.SIWXNoPass
)

// maxScopeDepth bounds the ancestor directories a sign-in looks up when a route's scope is
// the request's directory.
const maxScopeDepth = 8

// siwxChallenge builds the extension for a 402 of resource on s: a fresh random nonce,
// issuedAt now, on the route's networks.
func (g *Gate) siwxChallenge(s pass.Site, resource string) (map[string]any, error) {
	return pass.Challenge(s, resource, "Sign in to use your access pass for "+g.pass.ScopeOf(s.Path), g.now(), g.siwxChains())
}

// checkSIWX validates a proof for a request on s, now, on the route's networks
// (pass.Proof.Check), and returns its signer.
func (g *Gate) checkSIWX(p *pass.Proof, s pass.Site) (common.Address, PassRefusal) {
	return p.Check(s, g.now(), g.siwxChainOK)
}

// siwxChains are the networks a proof may name: those of the route's ways to pay, in
// order, once each. A wallet signs in on the chain it paid on, or any other the route
// takes: the proof shows who holds the key, the pass book what it paid for.
func (g *Gate) siwxChains() []pass.ChainSpec {
	out := []pass.ChainSpec{{ChainID: g.route.network.CAIP2, Type: "eip191"}}
	seen := map[string]bool{g.route.network.CAIP2: true}
	for _, o := range g.route.options {
		if !seen[o.network.CAIP2] {
			seen[o.network.CAIP2] = true
			out = append(out, pass.ChainSpec{ChainID: o.network.CAIP2, Type: "eip191"})
		}
	}
	return out
}

// siwxChainOK reports whether the route takes payments on the CAIP-2 network id.
func (g *Gate) siwxChainOK(id string) bool {
	if id == g.route.network.CAIP2 {
		return true
	}
	for _, o := range g.route.options {
		if o.network.CAIP2 == id {
			return true
		}
	}
	return false
}

// admitSIWX lets in a request whose SIGN-IN-WITH-X proof is good and whose signer holds
// a pass covering it. It returns the pass, or the reason the proof was refused ("" when
// the request brought none).
func (g *Gate) admitSIWX(ctx context.Context, in Input, h http.Header) (*Pass, PassRefusal) {
	vs := h.Values(HeaderSignInWithX)
	if len(vs) == 0 {
		return nil, ""
	}
	s, ok := pass.SiteOf(in.Resource)
	if !ok {
		return nil, ""
	}
	p, ok := pass.ParseProof(vs[0])
	if len(vs) != 1 || !ok {
		return nil, SIWXMalformed
	}
	addr, refused := g.checkSIWX(p, s)
	if refused != "" {
		return nil, refused
	}
	exp, err := g.passes.PassExpiry(ctx, g.passBookKeys(s, addr.Hex()))
	if err != nil {
		g.log.Error("x402 pass book unavailable", zap.Error(err))
		return nil, PassStoreUnavailable
	}
	if !g.now().Before(exp) {
		return nil, SIWXNoPass
	}
	fresh, err := g.passes.UseNonce(ctx, "siwx:"+s.Host+":"+p.Nonce, pass.NonceTTL)
	if err != nil {
		g.log.Error("x402 pass book unavailable", zap.Error(err))
		return nil, PassStoreUnavailable
	}
	if !fresh {
		return nil, SIWXNonce
	}
	scope := g.pass.ScopeOf(s.Path)
	return &Pass{Via: PassViaSIWX, Payer: addr.Hex(), Network: p.ChainID, Scope: scope, Expires: exp}, ""
}

// passBookKeys are the pass book entries that may hold payer's pass for a request on s:
// one per scope that could cover it and per key of this route, the retired ones included
// while the route keeps them to verify.
func (g *Gate) passBookKeys(s pass.Site, payer string) []string {
	scopes := g.passScopes(s.Path)
	ids := g.pass.KeyIDs()
	keys := make([]string, 0, len(scopes)*len(ids))
	for _, id := range ids {
		for _, sc := range scopes {
			keys = append(keys, pass.BookKey(id, s.Host, sc, payer))
		}
	}
	return keys
}

// passScopes are the scopes a pass covering the clean path p may have been bought for:
// the configured one, or p's directory and its ancestors.
func (g *Gate) passScopes(p string) []string {
	if g.pass.Scope() != "" {
		if !pass.InScope(p, g.pass.Scope()) {
			return nil
		}
		return []string{g.pass.Scope()}
	}
	var out []string
	for d := g.pass.ScopeOf(p); len(out) < maxScopeDepth; {
		out = append(out, d)
		if d == "/" {
			break
		}
		d = g.pass.ScopeOf(strings.TrimSuffix(d, "/"))
	}
	return out
}

// recordPass writes an issued pass into the pass book under the id of the key that signed
// it, so its payer can sign in on a route that holds that key.
func (g *Gate) recordPass(ctx context.Context, host string, p *Pass) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	if err := g.passes.RecordPass(ctx, pass.BookKey(g.pass.KeyIDs()[0], host, p.Scope, p.Payer), p.Expires); err != nil {
		g.log.Error("x402 pass not recorded for sign-in-with-x", zap.String("payer", p.Payer), zap.Error(err))
	}
}
