package gate

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
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

// HeaderSignInWithX carries a sign-in-with-x proof: base64 of its JSON payload.
const HeaderSignInWithX = "SIGN-IN-WITH-X"

// SignInWithX is the extension's key in PAYMENT-REQUIRED extensions.
const SignInWithX = "sign-in-with-x"

// siwxMaxAge bounds the age of a proof's issuedAt, as the reference server does.
const siwxMaxAge = 5 * time.Minute

// siwxSkew is how far in the future an issuedAt may lie: the clocks of a fleet.
const siwxSkew = 5 * time.Second

// maxSIWXBytes bounds the SIGN-IN-WITH-X header.
const maxSIWXBytes = 8 << 10

// maxScopeDepth bounds the ancestor directories a sign-in looks up when a route's scope is
// the request's directory.
const maxScopeDepth = 8

// Sign-in-with-x refusals (HeaderPassRefused), the reference's codes where it has one.
const (
	SIWXMalformed      PassRefusal = "invalid_siwx_payload"
	SIWXDomainMismatch PassRefusal = "invalid_siwx_domain_mismatch"
	SIWXURIMismatch    PassRefusal = "invalid_siwx_uri_mismatch"
	SIWXIssuedAt       PassRefusal = "invalid_siwx_issued_at"
	SIWXTooOld         PassRefusal = "invalid_siwx_issued_at_too_old"
	SIWXInFuture       PassRefusal = "invalid_siwx_issued_at_in_future"
	SIWXExpired        PassRefusal = "invalid_siwx_expired"
	SIWXNotYetValid    PassRefusal = "invalid_siwx_not_yet_valid"
	SIWXNonce          PassRefusal = "invalid_siwx_nonce"
	SIWXChainID        PassRefusal = "invalid_siwx_chain_id"
	SIWXSignature      PassRefusal = "invalid_siwx_signature"
	// SIWXNoPass: the proof is good, but the signer holds no live pass for this scope.
	SIWXNoPass PassRefusal = "siwx_no_pass"
)

// siwxChainSpec is one supportedChains entry.
type siwxChainSpec struct {
	ChainID string `json:"chainId"`
	Type    string `json:"type"`
}

// siwxInfo is the challenge's info, as @x402/extensions declares it.
type siwxInfo struct {
	Domain         string   `json:"domain"`
	URI            string   `json:"uri"`
	Statement      string   `json:"statement,omitempty"`
	Version        string   `json:"version"`
	Nonce          string   `json:"nonce"`
	IssuedAt       string   `json:"issuedAt"`
	ExpirationTime string   `json:"expirationTime,omitempty"`
	Resources      []string `json:"resources,omitempty"`
}

// siwxTime is JavaScript's Date.toISOString form, which the clients echo.
const siwxTime = "2006-01-02T15:04:05.000Z07:00"

// siwxChallenge builds the extension for a 402 of resource on s: a fresh random nonce,
// issuedAt now, valid for siwxMaxAge, on the route's network.
func (g *Gate) siwxChallenge(s pass.Site, resource string) (map[string]any, error) {
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("sign-in-with-x nonce: %w", err)
	}
	now := g.now().UTC()
	info := siwxInfo{
		Domain:         s.Host,
		URI:            resource,
		Statement:      "Sign in to use your access pass for " + g.pass.ScopeOf(s.Path),
		Version:        "1",
		Nonce:          hex.EncodeToString(raw),
		IssuedAt:       now.Format(siwxTime),
		ExpirationTime: now.Add(siwxMaxAge).Format(siwxTime),
		Resources:      []string{resource},
	}
	return map[string]any{
		"info":            info,
		"supportedChains": g.siwxChains(),
		"schema":          siwxSchema,
	}, nil
}

// siwxChains are the networks a proof may name: those of the route's ways to pay, in
// order, once each. A wallet signs in on the chain it paid on, or any other the route
// takes: the proof shows who holds the key, the pass book what it paid for.
func (g *Gate) siwxChains() []siwxChainSpec {
	out := []siwxChainSpec{{ChainID: g.route.network.CAIP2, Type: "eip191"}}
	seen := map[string]bool{g.route.network.CAIP2: true}
	for _, o := range g.route.options {
		if !seen[o.network.CAIP2] {
			seen[o.network.CAIP2] = true
			out = append(out, siwxChainSpec{ChainID: o.network.CAIP2, Type: "eip191"})
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

// siwxSchema is the JSON schema of the proof, as the extension publishes it.
var siwxSchema = map[string]any{
	"$schema": "https://json-schema.org/draft/2020-12/schema",
	"type":    "object",
	"properties": map[string]any{
		"domain": map[string]string{"type": "string"}, "address": map[string]string{"type": "string"},
		"statement": map[string]string{"type": "string"}, "uri": map[string]string{"type": "string", "format": "uri"},
		"version": map[string]string{"type": "string"}, "chainId": map[string]string{"type": "string"},
		"type": map[string]string{"type": "string"}, "nonce": map[string]string{"type": "string"},
		"issuedAt":       map[string]string{"type": "string", "format": "date-time"},
		"expirationTime": map[string]string{"type": "string", "format": "date-time"},
		"notBefore":      map[string]string{"type": "string", "format": "date-time"},
		"requestId":      map[string]string{"type": "string"},
		"resources":      map[string]any{"type": "array", "items": map[string]string{"type": "string", "format": "uri"}},
		"signature":      map[string]string{"type": "string"},
	},
	"required": []string{"domain", "address", "uri", "version", "chainId", "type", "nonce", "issuedAt", "signature"},
}

// siwxPayload is the SIGN-IN-WITH-X proof. Optional strings are pointers: EIP-4361 tells an
// absent statement or request id from an empty one.
type siwxPayload struct {
	Domain          string   `json:"domain"`
	Address         string   `json:"address"`
	Statement       *string  `json:"statement"`
	URI             string   `json:"uri"`
	Version         string   `json:"version"`
	ChainID         string   `json:"chainId"`
	Type            string   `json:"type"`
	Nonce           string   `json:"nonce"`
	IssuedAt        string   `json:"issuedAt"`
	ExpirationTime  *string  `json:"expirationTime"`
	NotBefore       *string  `json:"notBefore"`
	RequestID       *string  `json:"requestId"`
	Resources       []string `json:"resources"`
	SignatureScheme string   `json:"signatureScheme"`
	Signature       string   `json:"signature"`
}

// parseSIWX decodes the header value strictly.
func parseSIWX(v string) (*siwxPayload, bool) {
	if len(v) > maxSIWXBytes {
		return nil, false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
	if err != nil {
		return nil, false
	}
	var p siwxPayload
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil || dec.More() {
		return nil, false
	}
	if p.Domain == "" || p.Address == "" || p.URI == "" || p.Version == "" || p.ChainID == "" ||
		p.Type == "" || p.Nonce == "" || p.IssuedAt == "" || p.Signature == "" {
		return nil, false
	}
	return &p, true
}

// siwxMessage is the EIP-4361 message the proof's signature covers, byte for byte as
// @x402/extensions (through @signinwithethereum/siwe) writes it.
func siwxMessage(p *siwxPayload, addr common.Address, chainID int64) string {
	return siwxMessageWith(p, addr.Hex(), chainID)
}

// siwxMessageWith is siwxMessage with the address written as given.
func siwxMessageWith(p *siwxPayload, addr string, chainID int64) string {
	var b strings.Builder
	b.WriteString(p.Domain + " wants you to sign in with your Ethereum account:\n" + addr + "\n")
	if p.Statement == nil {
		b.WriteString("\n\n")
	} else {
		b.WriteString("\n" + *p.Statement + "\n\n")
	}
	b.WriteString("URI: " + p.URI + "\nVersion: " + p.Version + "\nChain ID: " + strconv.FormatInt(chainID, 10) +
		"\nNonce: " + p.Nonce + "\nIssued At: " + p.IssuedAt)
	if p.ExpirationTime != nil && *p.ExpirationTime != "" {
		b.WriteString("\nExpiration Time: " + *p.ExpirationTime)
	}
	if p.NotBefore != nil && *p.NotBefore != "" {
		b.WriteString("\nNot Before: " + *p.NotBefore)
	}
	if p.RequestID != nil {
		b.WriteString("\nRequest ID: " + *p.RequestID)
	}
	if p.Resources != nil {
		b.WriteString("\nResources:")
		for _, r := range p.Resources {
			b.WriteString("\n- " + r)
		}
	}
	return b.String()
}

// siwxAddress reads the proof's address: 0x-hex, and when mixed-case, correctly
// checksummed (EIP-55).
func siwxAddress(s string) (common.Address, bool) {
	if !strings.HasPrefix(s, "0x") || !common.IsHexAddress(s) {
		return common.Address{}, false
	}
	a := common.HexToAddress(s)
	body := s[2:]
	if body != strings.ToLower(body) && body != strings.ToUpper(body) && a.Hex() != s {
		return common.Address{}, false
	}
	return a, true
}

// parseJSTime reads a timestamp as new Date() would for the ISO forms clients send.
func parseJSTime(s string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}

// checkSIWX validates a proof for a request on s and returns its signer: the domain and
// the URI's origin are this site's, the times hold, the chain is the route's, and the
// EIP-191 signature over the EIP-4361 message is the address's own. Smart-contract
// wallets (EIP-1271) are not verified.
func (g *Gate) checkSIWX(p *siwxPayload, s pass.Site) (common.Address, PassRefusal) {
	if !strings.EqualFold(p.Domain, s.Host) {
		return common.Address{}, SIWXDomainMismatch
	}
	u, err := url.Parse(p.URI)
	if err != nil || !strings.EqualFold(u.Scheme+"://"+u.Host, s.Origin()) {
		return common.Address{}, SIWXURIMismatch
	}
	now := g.now()
	issued, ok := parseJSTime(p.IssuedAt)
	switch {
	case !ok:
		return common.Address{}, SIWXIssuedAt
	case now.Sub(issued) > siwxMaxAge:
		return common.Address{}, SIWXTooOld
	case issued.Sub(now) > siwxSkew:
		return common.Address{}, SIWXInFuture
	}
	if p.ExpirationTime != nil && *p.ExpirationTime != "" {
		if t, ok := parseJSTime(*p.ExpirationTime); !ok || !now.Before(t) {
			return common.Address{}, SIWXExpired
		}
	}
	if p.NotBefore != nil && *p.NotBefore != "" {
		if t, ok := parseJSTime(*p.NotBefore); !ok || now.Before(t) {
			return common.Address{}, SIWXNotYetValid
		}
	}
	if len(p.Nonce) < 8 || len(p.Nonce) > 128 {
		return common.Address{}, SIWXNonce
	}
	chain := strings.TrimPrefix(p.ChainID, "eip155:")
	id, err := strconv.ParseInt(chain, 10, 64)
	if p.Type != "eip191" || !g.siwxChainOK(p.ChainID) || err != nil {
		return common.Address{}, SIWXChainID
	}
	addr, ok := siwxAddress(p.Address)
	if !ok {
		return common.Address{}, SIWXMalformed
	}
	sig, err := hex.DecodeString(strings.TrimPrefix(p.Signature, "0x"))
	if err != nil || len(sig) != 65 {
		return common.Address{}, SIWXSignature
	}
	if sig[64] >= 27 {
		sig[64] -= 27
	}
	if signedBy(siwxMessage(p, addr, id), sig, addr) {
		return addr, ""
	}
	// A browser wallet hands out its address in lowercase, and a page has no keccak to
	// checksum it with: the paywall signs the message with the address as the wallet gave it.
	if lower := strings.ToLower(p.Address); p.Address == lower {
		as := *p
		if signedBy(siwxMessageWith(&as, lower, id), sig, addr) {
			return addr, ""
		}
	}
	return common.Address{}, SIWXSignature
}

// signedBy reports whether sig is addr's EIP-191 signature of msg.
func signedBy(msg string, sig []byte, addr common.Address) bool {
	pub, err := crypto.SigToPub(accounts.TextHash([]byte(msg)), sig)
	return err == nil && crypto.PubkeyToAddress(*pub) == addr
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
	p, ok := parseSIWX(vs[0])
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
	fresh, err := g.passes.UseNonce(ctx, "siwx:"+s.Host+":"+p.Nonce, siwxMaxAge+siwxSkew+time.Minute)
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
