// Package pass is the access pass of a route (docs/gate.md#access-passes): the signed,
// stateless token that lets one settled payment buy access, for a while, to every path
// under a scope of one site, and the pass book that sign-in-with-x reads
// (docs/gate.md#sign-in-with-x). The gate decides when a pass is issued and honoured.
package pass

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

	"github.com/x402gate/x402gate/gate/setting"
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
// the request brought was not honoured: one of the Refusal reasons.
const HeaderPassRefused = "X-402-PASS-REFUSED"

// MinKeyBytes is the shortest pass key NewIssuer accepts: 32 bytes, the HMAC-SHA256 block
// strength (`openssl rand -hex 32` makes one of 64).
const MinKeyBytes = 32

// maxPassBytes bounds a pass token a request brings; a real one is about 300 bytes.
const maxPassBytes = 1024

// MaxCookies bounds how many pass cookies of one request are checked.
const MaxCookies = 8

// passPrefix versions the token format.
const passPrefix = "p1"

// Refusal is the machine-readable reason a pass was not honoured.
type Refusal string

// Refusal reasons of a pass (HeaderPassRefused), checked in this order.
const (
	// Invalid: not a pass, or its signature does not match its content (tampered).
	Invalid Refusal = "pass_invalid"
	// KeyRetired: signed with a key this gate no longer holds.
	KeyRetired Refusal = "pass_key_retired"
	// OtherSite: issued for another host.
	OtherSite Refusal = "pass_other_site"
	// OtherScope: the request's path is outside the pass's scope.
	OtherScope Refusal = "pass_other_scope"
	// Expired: the pass's time is up.
	Expired Refusal = "pass_expired"
	// StoreUnavailable: the pass book (sign-in-with-x) could not be read; nothing is
	// let in (fail closed).
	StoreUnavailable Refusal = "pass_store_unavailable"
)

// Config makes one settled payment buy access for Duration to every path under Scope
// (docs/gate.md#access-passes). The zero value issues no passes.
type Config struct {
	// Duration is how long a pass lets its holder in. Default 0: no passes.
	Duration time.Duration `json:"duration,omitempty"`
	// Scope is the path prefix a pass covers, a directory starting and ending with "/"
	// ("/premium/"). Default: the directory of the paid request's path.
	Scope string `json:"scope,omitempty"`
	// Keys sign and verify passes, each at least MinKeyBytes long; the first signs,
	// all verify. Required with Duration. Never serialised.
	Keys []string `json:"-"`
}

// Validate checks the parts of c that a configuration file states; NewIssuer checks the
// keys too. Errors are *setting.Error (pass, pass_key).
func (c Config) Validate() error {
	switch {
	case c.Duration == 0 && c.Scope == "" && len(c.Keys) == 0:
		return nil
	case c.Duration <= 0:
		return setting.Errorf("pass", "duration must be positive")
	case c.Duration > 366*24*time.Hour:
		return setting.Errorf("pass", "duration %s is longer than a year", c.Duration)
	case c.Scope != "" && (!strings.HasPrefix(c.Scope, "/") || !strings.HasSuffix(c.Scope, "/") || path.Clean(c.Scope)+"/" != c.Scope && c.Scope != "/"):
		return setting.Errorf("pass", "scope %q must be a clean directory path that starts and ends with /", c.Scope)
	case len(c.Keys) == 0:
		return setting.Errorf("pass", "needs pass_key, the key that signs passes")
	}
	return nil
}

// passKey is one configured key and its public id.
type passKey struct {
	id  string
	key []byte
}

// Issuer signs and checks passes for one route.
type Issuer struct {
	duration time.Duration
	scope    string // "" is the request's directory
	keys     []passKey
}

// NewIssuer checks c and returns its Issuer; nil, and no error, when c issues no passes.
func NewIssuer(c Config) (*Issuer, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Duration == 0 {
		return nil, nil
	}
	p := &Issuer{duration: c.Duration, scope: c.Scope}
	seen := map[string]bool{}
	for i, k := range c.Keys {
		if len(k) < MinKeyBytes {
			return nil, setting.Errorf("pass_key", "key %d is %d bytes; at least %d are required", i+1, len(k), MinKeyBytes)
		}
		id := KeyID([]byte(k))
		if seen[id] {
			return nil, setting.Errorf("pass_key", "key %d is given twice", i+1)
		}
		seen[id] = true
		p.keys = append(p.keys, passKey{id: id, key: []byte(k)})
	}
	return p, nil
}

// KeyID names a key without revealing it: the first 12 hex digits of a SHA-256 of it.
func KeyID(k []byte) string {
	sum := sha256.Sum256(append([]byte("x402gate pass key id\n"), k...))
	return hex.EncodeToString(sum[:6])
}

// Claims is what a pass binds.
type Claims struct {
	Host    string `json:"h"`
	Scope   string `json:"s"`
	Expiry  int64  `json:"e"` // Unix seconds
	Payer   string `json:"p"`
	Network string `json:"n"`
	Tx      string `json:"t"`
}

// Pass is how a request was let in by a pass, as the upstream sees it (gate.Paid.Pass).
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
	ViaCookie = "cookie"
	ViaHeader = "header"
	ViaSIWX   = "sign-in-with-x"
)

var b64 = base64.RawURLEncoding

// Sign makes the token of c with the first key.
func (p *Issuer) Sign(c Claims) (string, error) {
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

// Check verifies token for a request to host and reqPath (its clean path) at now: the
// signature first (in constant time), then the site, the scope and the expiry.
func (p *Issuer) Check(token, host, reqPath string, now time.Time) (*Claims, Refusal) {
	if len(token) > maxPassBytes {
		return nil, Invalid
	}
	parts := strings.Split(token, ".")
	if len(parts) != 4 || parts[0] != passPrefix {
		return nil, Invalid
	}
	var key []byte
	for _, k := range p.keys {
		if k.id == parts[1] {
			key = k.key
		}
	}
	if key == nil {
		return nil, KeyRetired
	}
	mac, err := b64.DecodeString(parts[3])
	if err != nil || !hmac.Equal(mac, passMAC(key, parts[0]+"."+parts[1]+"."+parts[2])) {
		return nil, Invalid
	}
	body, err := b64.DecodeString(parts[2])
	if err != nil {
		return nil, Invalid
	}
	var c Claims
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil || c.Scope == "" || c.Host == "" {
		return nil, Invalid
	}
	switch {
	case !strings.EqualFold(c.Host, host):
		return nil, OtherSite
	case !InScope(reqPath, c.Scope):
		return nil, OtherScope
	case !now.Before(time.Unix(c.Expiry, 0)):
		return nil, Expired
	}
	return &c, ""
}

// InScope reports whether the clean path p lies under scope, a directory ending in "/".
func InScope(p, scope string) bool {
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

// ScopeOf is the scope of a pass bought by a request to the clean path p.
func (p *Issuer) ScopeOf(reqPath string) string {
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

// Site is the public origin and clean path of a request, from its resource URL.
type Site struct {
	Scheme, Host, Path string
}

// SiteOf reads the Site of a resource URL; false when it names no host.
func SiteOf(resource string) (Site, bool) {
	u, err := url.Parse(resource)
	if err != nil || u.Host == "" {
		return Site{}, false
	}
	return Site{Scheme: u.Scheme, Host: strings.ToLower(u.Host), Path: cleanPath(u.Path)}, true
}

// Origin is the site's scheme://host.
func (s Site) Origin() string { return s.Scheme + "://" + s.Host }

// Describe says what one payment buys for a request to the clean path reqPath: "24 hours
// of /premium/".
func (p *Issuer) Describe(reqPath string) string {
	return humanDuration(p.duration) + " of " + p.ScopeOf(reqPath)
}

// Duration is how long a pass lets its holder in.
func (p *Issuer) Duration() time.Duration { return p.duration }

// Scope is the configured scope; "" is the request's directory.
func (p *Issuer) Scope() string { return p.scope }

// KeyIDs are the ids of the keys that verify passes, the signing one first.
func (p *Issuer) KeyIDs() []string {
	ids := make([]string, len(p.keys))
	for i, k := range p.keys {
		ids[i] = k.id
	}
	return ids
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
