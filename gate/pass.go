package gate

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/x402"
)

// An access pass lets one settled payment buy access, for a while, to every path under a
// scope of one site (docs/gate.md#access-passes). It is stateless: an HMAC-SHA256 over the
// host, the scope, the expiry, the payer, the network and the settlement transaction,
// under a key id, so any instance that holds the key verifies it. The first key signs,
// every key verifies: adding a new key first and keeping the old one rotates without
// refusing passes already out.

// HeaderPass carries a pass: the gate sets it on the paid answer, and a client that is
// not a browser sends it back on later requests. Browsers get the same value in the
// CookiePass cookie. It is a bearer credential: the gate strips it before the upstream and
// never logs it.
const HeaderPass = "X-402-PASS"

// CookiePass is the name of the pass cookie (HttpOnly, SameSite=Lax, Path = the scope).
const CookiePass = "x402_pass"

// HeaderPassRefused names, on the 402 that follows, why a pass or a sign-in-with-x proof
// the request brought was not honoured: one of the PassRefusal reasons.
const HeaderPassRefused = "X-402-PASS-REFUSED"

// MinPassKeyBytes is the shortest pass key New accepts: 32 bytes, the HMAC-SHA256 block
// strength (`openssl rand -hex 32` makes one of 64).
const MinPassKeyBytes = 32

// maxPassBytes bounds a pass token a request brings; a real one is about 300 bytes.
const maxPassBytes = 1024

// maxPassCookies bounds how many pass cookies of one request are checked.
const maxPassCookies = 8

// passPrefix versions the token format.
const passPrefix = "p1"

// PassRefusal is the machine-readable reason a pass was not honoured.
type PassRefusal string

// Refusal reasons of a pass (HeaderPassRefused), checked in this order.
const (
	// PassInvalid: not a pass, or its signature does not match its content (tampered).
	PassInvalid PassRefusal = "pass_invalid"
	// PassKeyRetired: signed with a key this gate no longer holds.
	PassKeyRetired PassRefusal = "pass_key_retired"
	// PassOtherSite: issued for another host.
	PassOtherSite PassRefusal = "pass_other_site"
	// PassOtherScope: the request's path is outside the pass's scope.
	PassOtherScope PassRefusal = "pass_other_scope"
	// PassExpired: the pass's time is up.
	PassExpired PassRefusal = "pass_expired"
	// PassStoreUnavailable: the pass book (sign-in-with-x) could not be read; nothing is
	// let in (fail closed).
	PassStoreUnavailable PassRefusal = "pass_store_unavailable"
)

// PassConfig makes one settled payment buy access for Duration to every path under Scope
// (docs/gate.md#access-passes). The zero value issues no passes.
type PassConfig struct {
	// Duration is how long a pass lets its holder in. Default 0: no passes.
	Duration time.Duration `json:"duration,omitempty"`
	// Scope is the path prefix a pass covers, a directory starting and ending with "/"
	// ("/premium/"). Default: the directory of the paid request's path.
	Scope string `json:"scope,omitempty"`
	// Keys sign and verify passes, each at least MinPassKeyBytes long; the first signs,
	// all verify. Required with Duration. Never serialised.
	Keys []string `json:"-"`
}

// validate checks the parts of c that a configuration file states; New checks the keys.
func (c PassConfig) validate() error {
	switch {
	case c.Duration == 0 && c.Scope == "" && len(c.Keys) == 0:
		return nil
	case c.Duration <= 0:
		return configErr("pass", "duration must be positive")
	case c.Duration > 366*24*time.Hour:
		return configErr("pass", "duration %s is longer than a year", c.Duration)
	case c.Scope != "" && (!strings.HasPrefix(c.Scope, "/") || !strings.HasSuffix(c.Scope, "/") || path.Clean(c.Scope)+"/" != c.Scope && c.Scope != "/"):
		return configErr("pass", "scope %q must be a clean directory path that starts and ends with /", c.Scope)
	case len(c.Keys) == 0:
		return configErr("pass", "needs pass_key, the key that signs passes")
	}
	return nil
}

// passKey is one configured key and its public id.
type passKey struct {
	id  string
	key []byte
}

// passIssuer signs and checks passes for one route.
type passIssuer struct {
	duration time.Duration
	scope    string // "" is the request's directory
	keys     []passKey
}

func newPassIssuer(c PassConfig) (*passIssuer, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	if c.Duration == 0 {
		return nil, nil
	}
	p := &passIssuer{duration: c.Duration, scope: c.Scope}
	seen := map[string]bool{}
	for i, k := range c.Keys {
		if len(k) < MinPassKeyBytes {
			return nil, configErr("pass_key", "key %d is %d bytes; at least %d are required", i+1, len(k), MinPassKeyBytes)
		}
		id := passKeyID([]byte(k))
		if seen[id] {
			return nil, configErr("pass_key", "key %d is given twice", i+1)
		}
		seen[id] = true
		p.keys = append(p.keys, passKey{id: id, key: []byte(k)})
	}
	return p, nil
}

// passKeyID names a key without revealing it: the first 12 hex digits of a SHA-256 of it.
func passKeyID(k []byte) string {
	sum := sha256.Sum256(append([]byte("x402gate pass key id\n"), k...))
	return hex.EncodeToString(sum[:6])
}

// passClaims is what a pass binds.
type passClaims struct {
	Host    string `json:"h"`
	Scope   string `json:"s"`
	Expiry  int64  `json:"e"` // Unix seconds
	Payer   string `json:"p"`
	Network string `json:"n"`
	Tx      string `json:"t"`
}

// Pass is how a request was let in by a pass, as the upstream sees it in Paid.Pass.
type Pass struct {
	// Via is how it was presented: "cookie", "header" or "sign-in-with-x".
	Via string
	// Payer, Network and Transaction are those of the payment that bought the pass.
	Payer       string
	Network     string
	Transaction string
	// Scope is the path prefix the pass covers.
	Scope string
	// Expires is when the pass runs out.
	Expires time.Time
}

// Ways a pass is presented (Pass.Via).
const (
	PassViaCookie = "cookie"
	PassViaHeader = "header"
	PassViaSIWX   = "sign-in-with-x"
)

var b64 = base64.RawURLEncoding

// sign makes the token of c with the first key.
func (p *passIssuer) sign(c passClaims) (string, error) {
	body, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("pass: %w", err)
	}
	k := p.keys[0]
	head := passPrefix + "." + k.id + "." + b64.EncodeToString(body)
	return head + "." + b64.EncodeToString(passMAC(k.key, head)), nil
}

func passMAC(key []byte, head string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(head))
	return m.Sum(nil)
}

// check verifies token for a request to host and p (its clean path) at now: the
// signature first (in constant time), then the site, the scope and the expiry.
func (p *passIssuer) check(token, host, reqPath string, now time.Time) (*passClaims, PassRefusal) {
	if len(token) > maxPassBytes {
		return nil, PassInvalid
	}
	parts := strings.Split(token, ".")
	if len(parts) != 4 || parts[0] != passPrefix {
		return nil, PassInvalid
	}
	var key []byte
	for _, k := range p.keys {
		if k.id == parts[1] {
			key = k.key
		}
	}
	if key == nil {
		return nil, PassKeyRetired
	}
	mac, err := b64.DecodeString(parts[3])
	if err != nil || !hmac.Equal(mac, passMAC(key, parts[0]+"."+parts[1]+"."+parts[2])) {
		return nil, PassInvalid
	}
	body, err := b64.DecodeString(parts[2])
	if err != nil {
		return nil, PassInvalid
	}
	var c passClaims
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil || c.Scope == "" || c.Host == "" {
		return nil, PassInvalid
	}
	switch {
	case !strings.EqualFold(c.Host, host):
		return nil, PassOtherSite
	case !inScope(reqPath, c.Scope):
		return nil, PassOtherScope
	case !now.Before(time.Unix(c.Expiry, 0)):
		return nil, PassExpired
	}
	return &c, ""
}

// inScope reports whether the clean path p lies under scope, a directory ending in "/".
func inScope(p, scope string) bool {
	return strings.HasPrefix(p, scope) || p+"/" == scope
}

// cleanPath is the request path as scopes compare it: decoded, cleaned of dot segments,
// its trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	c := path.Clean("/" + p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// scopeOf is the scope of a pass bought by a request to the clean path p.
func (p *passIssuer) scopeOf(reqPath string) string {
	if p.scope != "" {
		return p.scope
	}
	if strings.HasSuffix(reqPath, "/") {
		return reqPath
	}
	d := path.Dir(reqPath)
	if d == "/" {
		return "/"
	}
	return d + "/"
}

// site is the public origin and clean path of a request, from its resource URL.
type site struct {
	scheme, host, path string
}

func siteOf(resource string) (site, bool) {
	u, err := url.Parse(resource)
	if err != nil || u.Host == "" {
		return site{}, false
	}
	return site{scheme: u.Scheme, host: strings.ToLower(u.Host), path: cleanPath(u.Path)}, true
}

// origin is the site's scheme://host.
func (s site) origin() string { return s.scheme + "://" + s.host }

// PassDescription says what one payment buys on this route for a request to resource:
// "24 hours of /premium/"; "" without passes.
func (g *Gate) PassDescription(resource string) string {
	if g.pass == nil {
		return ""
	}
	s, ok := siteOf(resource)
	if !ok {
		return ""
	}
	return humanDuration(g.pass.duration) + " of " + g.pass.scopeOf(s.path)
}

// humanDuration renders d for people: "24 hours", "30 minutes", "90 seconds".
func humanDuration(d time.Duration) string {
	unit := func(n int64, one string) string {
		if n == 1 {
			return "1 " + one
		}
		return strconv.FormatInt(n, 10) + " " + one + "s"
	}
	switch {
	case d%(24*time.Hour) == 0 && d >= 48*time.Hour:
		return unit(int64(d/(24*time.Hour)), "day")
	case d%time.Hour == 0:
		return unit(int64(d/time.Hour), "hour")
	case d%time.Minute == 0:
		return unit(int64(d/time.Minute), "minute")
	}
	return unit(int64((d+time.Second-1)/time.Second), "second")
}

// admitPass looks for a valid pass in the request: the HeaderPass header first, then the
// pass cookies. It returns the pass that lets the request in, or the reason the first
// pass presented was refused ("" when none was presented).
func (g *Gate) admitPass(in Input, h http.Header) (*Pass, PassRefusal) {
	s, ok := siteOf(in.Resource)
	if !ok {
		return nil, ""
	}
	type presented struct{ token, via string }
	var all []presented
	for _, v := range h.Values(HeaderPass) {
		all = append(all, presented{strings.TrimSpace(v), PassViaHeader})
	}
	for _, c := range readCookies(h, CookiePass) {
		if len(all) >= maxPassCookies+1 {
			break
		}
		all = append(all, presented{c, PassViaCookie})
	}
	var first PassRefusal
	now := g.now()
	for _, p := range all {
		c, refused := g.pass.check(p.token, s.host, s.path, now)
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
	s, ok := siteOf(in.Resource)
	if !ok || res.Settlement == nil {
		return nil
	}
	set := res.Settlement
	exp := g.now().Add(g.pass.duration).Truncate(time.Second)
	c := passClaims{Host: s.host, Scope: g.pass.scopeOf(s.path), Expiry: exp.Unix(), Payer: set.Payer, Network: set.Network, Tx: set.Transaction}
	token, err := g.pass.sign(c)
	if err != nil {
		g.log.Error("x402 pass not issued", zap.Error(err))
		return nil
	}
	g.setPass(h, s, c, token, g.pass.duration)
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

// errPassBook is wrapped by pass book failures.
var errPassBook = errors.New("pass book unavailable")

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
	s, ok := siteOf(in.Resource)
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
	s, ok := siteOf(in.Resource)
	left := p.Expires.Sub(g.now())
	if !ok || left < time.Second {
		return
	}
	c := passClaims{Host: s.host, Scope: p.Scope, Expiry: p.Expires.Unix(), Payer: p.Payer, Network: p.Network}
	token, err := g.pass.sign(c)
	if err != nil {
		g.log.Error("x402 pass not reissued", zap.Error(err))
		return
	}
	g.setPass(h, s, c, token, left)
}

// setPass puts token on the answer: the cookie, HeaderPass and HeaderPassExpires.
func (g *Gate) setPass(h http.Header, s site, c passClaims, token string, maxAge time.Duration) {
	cookie := &http.Cookie{
		Name: CookiePass, Value: token, Path: c.Scope, MaxAge: int(maxAge / time.Second),
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.scheme == "https",
	}
	h.Add("Set-Cookie", cookie.String())
	h.Set(HeaderPass, token)
	h.Set(HeaderPassExpires, time.Unix(c.Expiry, 0).UTC().Format(time.RFC3339))
	// The answer carries a credential: no shared cache may keep it for others.
	h.Set("Cache-Control", "private")
	h.Set("Access-Control-Expose-Headers", exposeHeaders+", "+HeaderPass+", "+HeaderPassExpires)
}
