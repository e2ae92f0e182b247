package gate

import (
	"context"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/gate/pass"
	"github.com/x402gate/x402gate/x402"
)

// The request side of access passes (docs/gate.md#access-passes): finding a pass or a
// sign-in-with-x proof on a request, letting it in, issuing a pass with a payment, and
// telling a refused client why.

// admitPass looks for a valid pass in the request: the HeaderPass header first, then the
// pass cookies. It returns the pass that lets the request in, or the reason the first
// pass presented was refused ("" when none was presented).
func (g *Gate) admitPass(in Input, h http.Header) (*Pass, PassRefusal) {
	s, ok := pass.SiteOf(in.Resource)
	if !ok {
		return nil, ""
	}
	type presented struct{ token, via string }
	var all []presented
	for _, v := range h.Values(HeaderPass) {
		all = append(all, presented{strings.TrimSpace(v), PassViaHeader})
	}
	for _, c := range readCookies(h, CookiePass) {
		if len(all) >= pass.MaxCookies+1 {
			break
		}
		all = append(all, presented{c, PassViaCookie})
	}
	var first PassRefusal
	now := g.now()
	for _, p := range all {
		c, refused := g.pass.Check(p.token, s.Host, s.Path, now)
		if c != nil {
			return &Pass{Via: p.via, Payer: c.Payer, Network: c.Network, Transaction: c.Tx, Scope: c.Scope, Expires: time.Unix(c.Expiry, 0)}, ""
		}
		if first == "" {
			first = refused
		}
	}
	return nil, first
}

// readCookies returns the values of the cookies called name in h.
func readCookies(h http.Header, name string) []string {
	var out []string
	for _, c := range (&http.Request{Header: h}).CookiesNamed(name) {
		out = append(out, c.Value)
	}
	return out
}

// issuePass signs a pass for the settled result res of a request, sets it as a cookie and
// in HeaderPass on h, and records it in the pass book for sign-in-with-x. It returns the
// pass, or nil when none could be made (logged; the paid request still goes through).
func (g *Gate) issuePass(in Input, res *Result, h http.Header) *Pass {
	s, ok := pass.SiteOf(in.Resource)
	if !ok || res.Settlement == nil {
		return nil
	}
	set := res.Settlement
	exp := g.now().Add(g.pass.Duration()).Truncate(time.Second)
	c := pass.Claims{Host: s.Host, Scope: g.pass.ScopeOf(s.Path), Expiry: exp.Unix(), Payer: set.Payer, Network: set.Network, Tx: set.Transaction}
	token, err := g.pass.Sign(c)
	if err != nil {
		g.log.Error("x402 pass not issued", zap.Error(err))
		return nil
	}
	g.setPass(h, s, c, token, g.pass.Duration())
	g.passEvent(PassEvent{Event: PassIssued})
	return &Pass{Payer: c.Payer, Network: c.Network, Transaction: c.Tx, Scope: c.Scope, Expires: exp}
}

// HeaderPassExpires tells a client when the pass in HeaderPass runs out (RFC 3339, UTC).
const HeaderPassExpires = "X-402-PASS-EXPIRES"

// stripPass removes the pass header and the pass cookies from a request before the
// upstream sees it, keeping every other cookie.
func stripPass(h http.Header) {
	h.Del(HeaderPass)
	h.Del(HeaderSignInWithX)
	cookies := h.Values("Cookie")
	if len(cookies) == 0 {
		return
	}
	var keep []string
	for _, line := range cookies {
		for _, part := range strings.Split(line, ";") {
			name, _, _ := strings.Cut(strings.TrimSpace(part), "=")
			if name != CookiePass && strings.TrimSpace(part) != "" {
				keep = append(keep, strings.TrimSpace(part))
			}
		}
	}
	h.Del("Cookie")
	if len(keep) > 0 {
		h.Set("Cookie", strings.Join(keep, "; "))
	}
}

// passChallengeHeaders adds to a 402 answer what a returning payer needs: why its pass was
// refused, and the sign-in-with-x challenge in PAYMENT-REQUIRED.
func (g *Gate) passChallengeHeaders(res *Result, in Input, refused PassRefusal) {
	if res.Status != http.StatusPaymentRequired {
		return
	}
	res.display.pass = g.PassDescription(in.Resource)
	if refused != "" {
		res.Header.Set(HeaderPassRefused, string(refused))
		res.Header.Set("Access-Control-Expose-Headers", exposeHeaders+", "+HeaderPassRefused)
	}
	if res.challenge == nil {
		return
	}
	s, ok := pass.SiteOf(in.Resource)
	if !ok {
		return
	}
	ext, err := g.siwxChallenge(s, in.Resource)
	if err != nil {
		g.log.Error("x402 sign-in-with-x challenge not made", zap.Error(err))
		return
	}
	pr := *res.challenge
	pr.Extensions = map[string]any{}
	for k, v := range res.challenge.Extensions {
		pr.Extensions[k] = v
	}
	pr.Extensions[SignInWithX] = ext
	hv, err := x402.EncodePaymentRequired(&pr)
	if err != nil {
		g.log.Error("x402 PAYMENT-REQUIRED with sign-in-with-x too large", zap.Error(err))
		return
	}
	res.challenge = &pr
	res.Header.Set(x402.HeaderPaymentRequired, hv)
}

// admit looks for a pass, then a sign-in-with-x proof, that lets the request in. It
// returns the pass, or why what the request presented was refused.
func (g *Gate) admit(ctx context.Context, in Input, h http.Header) (*Pass, PassRefusal) {
	p, refused := g.admitPass(in, h)
	if p == nil {
		var sr PassRefusal
		if p, sr = g.admitSIWX(ctx, in, h); p == nil && refused == "" {
			refused = sr
		}
	}
	if p != nil {
		g.passEvent(PassEvent{Event: PassAdmitted, Via: p.Via})
		return p, ""
	}
	if refused != "" {
		g.log.Info("x402 pass refused", zap.String("reason", string(refused)))
		g.passEvent(PassEvent{Event: PassRefused, Reason: refused})
	}
	return nil, refused
}

// PassEvent is one thing that happened to a pass, as Options.OnPass sees it. No field
// carries a payer or a token.
type PassEvent struct {
	// Event is PassIssued, PassAdmitted or PassRefused.
	Event string
	// Via is how an admitted request presented its pass (Pass.Via).
	Via string
	// Reason is why a pass or a proof was refused.
	Reason PassRefusal
}

// PassEvent kinds.
const (
	PassIssued   = "issued"
	PassAdmitted = "admitted"
	PassRefused  = "refused"
)

func (g *Gate) passEvent(ev PassEvent) {
	if g.onPass != nil {
		g.onPass(ev)
	}
}

// servePass runs next for a request a pass let in: no payment, the credentials stripped,
// Paid.Pass in the context.
func (g *Gate) servePass(w http.ResponseWriter, r *http.Request, in Input, p *Pass, next NextFunc) error {
	stripPaymentHeaders(r.Header)
	stripPass(r.Header)
	if p.Via == PassViaSIWX {
		g.reissuePass(in, p, w.Header())
	}
	w.Header().Set("Cache-Control", "private")
	ctx := context.WithValue(r.Context(), paidKey{}, &Paid{Pass: p})
	return next(w, r.WithContext(ctx))
}

// reissuePass gives a wallet that signed in the pass it holds, until the same expiry, so a
// browser's stylesheets and images come in with the cookie. It names no transaction: the
// pass book keeps none. A pass that cannot be made is logged; the request still goes
// through.
func (g *Gate) reissuePass(in Input, p *Pass, h http.Header) {
	s, ok := pass.SiteOf(in.Resource)
	left := p.Expires.Sub(g.now())
	if !ok || left < time.Second {
		return
	}
	c := pass.Claims{Host: s.Host, Scope: p.Scope, Expiry: p.Expires.Unix(), Payer: p.Payer, Network: p.Network}
	token, err := g.pass.Sign(c)
	if err != nil {
		g.log.Error("x402 pass not reissued", zap.Error(err))
		return
	}
	g.setPass(h, s, c, token, left)
}

// setPass puts token on the answer: the cookie, HeaderPass and HeaderPassExpires.
func (g *Gate) setPass(h http.Header, s pass.Site, c pass.Claims, token string, maxAge time.Duration) {
	cookie := &http.Cookie{
		Name: CookiePass, Value: token, Path: c.Scope, MaxAge: int(maxAge / time.Second),
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.Scheme == "https",
	}
	h.Add("Set-Cookie", cookie.String())
	h.Set(HeaderPass, token)
	h.Set(HeaderPassExpires, time.Unix(c.Expiry, 0).UTC().Format(time.RFC3339))
	// The answer carries a credential: no shared cache may keep it for others.
	h.Set("Cache-Control", "private")
	h.Set("Access-Control-Expose-Headers", exposeHeaders+", "+HeaderPass+", "+HeaderPassExpires)
}
