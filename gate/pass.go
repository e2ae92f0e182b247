package gate

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
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
