package gate

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/x402gate/x402gate/x402"
)

// The pass keys of the tests: 32 bytes and more, as New requires.
const (
	testPassKey    = "test-pass-key-0123456789abcdef-0123456789"
	testPassKeyNew = "test-pass-key-rotated-fedcba9876543210-xyz"
)

// clock is a settable gate clock: the real time plus an offset the test moves.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// passConfig is the env's route with passes of 1h over /premium/ signed by keys.
func (v *testEnv) passConfig(keys ...string) Config {
	cfg := v.config()
	cfg.Pass = PassConfig{Duration: time.Hour, Scope: "/premium/", Keys: keys}
	return cfg
}

// getWith sends GET url with Host host (when set) and the given headers.
func getWith(t *testing.T, url, host string, h http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	if host != "" {
		req.Host = host
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return res
}

// payForPass pays once with a v2 payment for url and returns the answer's pass.
func (v *testEnv) payForPass(t *testing.T, url, host string) (token string, res *http.Response) {
	t.Helper()
	c := readChallenge(t, getWith(t, url, host, nil))
	name, value := v.sign(t, x402.Version2, v.payer, c, tamper{})
	res = getWith(t, url, host, http.Header{name: {value}})
	readBody(t, res)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("paid request: %d", res.StatusCode)
	}
	token = res.Header.Get(HeaderPass)
	if token == "" {
		t.Fatal("the paid answer carries no pass")
	}
	return token, res
}

// TestPassIssuedWithPayment: the paid answer carries the pass in X-402-PASS and as a
// cookie that is HttpOnly, SameSite=Lax, scoped to the pass's path and lives as long as
// the pass; the upstream learns which pass the payment bought.
func TestPassIssuedWithPayment(t *testing.T) {
	env := newTestEnv(t)
	up := &upstream{}
	srv := serve(t, env.gate(t, env.passConfig(testPassKey), Options{}), up)
	token, res := env.payForPass(t, srv.URL+"/premium/a.html", "")
	var cookie *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == CookiePass {
			cookie = c
		}
	}
	switch {
	case cookie == nil:
		t.Fatalf("no %s cookie; Set-Cookie %q", CookiePass, res.Header.Values("Set-Cookie"))
	case cookie.Value != token:
		t.Error("the cookie and the header carry different passes")
	case !cookie.HttpOnly || cookie.SameSite != http.SameSiteLaxMode || cookie.Secure:
		t.Errorf("cookie attributes %q: want HttpOnly, SameSite=Lax, not Secure over plain http", res.Header.Get("Set-Cookie"))
	case cookie.Path != "/premium/" || cookie.MaxAge != 3600:
		t.Errorf("cookie Path %q Max-Age %d, want /premium/ and 3600", cookie.Path, cookie.MaxAge)
	}
	if cc := res.Header.Get("Cache-Control"); cc != "private" {
		t.Errorf("Cache-Control %q on the answer that carries the pass, want private", cc)
	}
	if exp, err := time.Parse(time.RFC3339, res.Header.Get(HeaderPassExpires)); err != nil || exp.IsZero() {
		t.Errorf("%s %q", HeaderPassExpires, res.Header.Get(HeaderPassExpires))
	}
	if !strings.Contains(res.Header.Get("Access-Control-Expose-Headers"), HeaderPass) {
		t.Errorf("Access-Control-Expose-Headers %q lacks %s", res.Header.Get("Access-Control-Expose-Headers"), HeaderPass)
	}
	if p := up.lastPaid(); p == nil || p.PassIssued == nil || p.PassIssued.Scope != "/premium/" || p.Pass != nil {
		t.Errorf("Paid = %+v", p)
	}
}

// TestPassLetsInAndRefuses: one payment, then requests with its pass. A valid pass (header
// or cookie, on this instance or another with the same key, or after the key was rotated
// but still kept) lets the request in without a payment; a pass for another site, another
// scope, an expired, a tampered one and one signed with a retired key are each refused
// with their reason in X-402-PASS-REFUSED, and the ordinary 402 follows. The chain shows
// exactly one transfer.
func TestPassLetsInAndRefuses(t *testing.T) {
	env := newTestEnv(t)
	clk := &clock{}
	up := &upstream{}
	const host = "shop.example"
	srvA := serve(t, env.gate(t, env.passConfig(testPassKey), Options{Now: clk.now}), up)
	// Instance B shares the key, not the process: a pass is stateless.
	srvB := serve(t, env.gate(t, env.passConfig(testPassKey), Options{Now: clk.now}), up)
	// Rotated: a new first key, the old one kept to verify.
	srvRotated := serve(t, env.gate(t, env.passConfig(testPassKeyNew, testPassKey), Options{Now: clk.now}), up)
	// Retired: only the new key.
	srvRetired := serve(t, env.gate(t, env.passConfig(testPassKeyNew), Options{Now: clk.now}), up)
	// Lenient: a dot-dot path reaches the scope check instead of the ambiguous-path refusal.
	lenient := env.passConfig(testPassKey)
	lenient.Paths = PathsLenient
	srvLenient := serve(t, env.gate(t, lenient, Options{Now: clk.now}), up)

	before := env.ledger(t, env.payer.Address)
	token, _ := env.payForPass(t, srvA.URL+"/premium/a.html", host)
	parts := strings.Split(token, ".")
	flip := func(s string) string {
		b := []byte(s)
		if b[5] == 'A' {
			b[5] = 'B'
		} else {
			b[5] = 'A'
		}
		return string(b)
	}
	tampered := strings.Join([]string{parts[0], parts[1], flip(parts[2]), parts[3]}, ".")
	forgedMAC := strings.Join([]string{parts[0], parts[1], parts[2], flip(parts[3])}, ".")

	for _, tc := range []struct {
		name   string
		url    string
		host   string
		header http.Header
		later  time.Duration
		want   PassRefusal // "" lets in
	}{
		{"a valid pass in the header lets in", srvA.URL + "/premium/b.html", host, http.Header{HeaderPass: {token}}, 0, ""},
		{"a valid pass in the cookie lets in", srvA.URL + "/premium/img/c.png", host, http.Header{"Cookie": {"theme=dark; " + CookiePass + "=" + token}}, 0, ""},
		{"the scope's own directory is in scope", srvA.URL + "/premium/", host, http.Header{HeaderPass: {token}}, 0, ""},
		{"a pass from instance A works on instance B with the same key", srvB.URL + "/premium/d.html", host, http.Header{HeaderPass: {token}}, 0, ""},
		{"a pass signed with a key kept after rotation lets in", srvRotated.URL + "/premium/e.html", host, http.Header{HeaderPass: {token}}, 0, ""},
		{"a pass for another site is refused", srvA.URL + "/premium/b.html", "other.example", http.Header{HeaderPass: {token}}, 0, PassOtherSite},
		{"a pass for another scope is refused", srvA.URL + "/free/b.html", host, http.Header{HeaderPass: {token}}, 0, PassOtherScope},
		{"a dot-dot path out of the scope is refused with paths lenient", srvLenient.URL + "/premium/../secret.html", host, http.Header{HeaderPass: {token}}, 0, PassOtherScope},
		{"a tampered pass is refused", srvA.URL + "/premium/b.html", host, http.Header{HeaderPass: {tampered}}, 0, PassInvalid},
		{"a pass with a forged signature is refused", srvA.URL + "/premium/b.html", host, http.Header{HeaderPass: {forgedMAC}}, 0, PassInvalid},
		{"something that is not a pass is refused", srvA.URL + "/premium/b.html", host, http.Header{"Cookie": {CookiePass + "=hello"}}, 0, PassInvalid},
		{"a pass signed with a retired key is refused", srvRetired.URL + "/premium/b.html", host, http.Header{HeaderPass: {token}}, 0, PassKeyRetired},
		{"an expired pass is refused", srvA.URL + "/premium/b.html", host, http.Header{HeaderPass: {token}}, time.Hour + time.Second, PassExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk.advance(tc.later)
			defer clk.advance(-tc.later)
			calls := up.calls.Load()
			res := getWith(t, tc.url, tc.host, tc.header)
			body := readBody(t, res)
			if tc.want == "" {
				if res.StatusCode != 200 || up.calls.Load() != calls+1 {
					t.Fatalf("status %d (refused %q), upstream calls %d; want 200 through the pass", res.StatusCode, res.Header.Get(HeaderPassRefused), up.calls.Load()-calls)
				}
				p := up.lastPaid()
				if p == nil || p.Pass == nil || p.Settlement != nil || !strings.EqualFold(p.Pass.Payer, env.payer.Address.Hex()) || !isTxHash(p.Pass.Transaction) {
					t.Fatalf("Paid = %+v", p)
				}
				if up.leaked.Load() != 0 {
					t.Error("a credential reached the upstream")
				}
				if cc := res.Header.Get("Cache-Control"); cc != "private" {
					t.Errorf("Cache-Control %q on an answer a pass let in, want private", cc)
				}
				return
			}
			if res.StatusCode != http.StatusPaymentRequired || errorOf(t, body) != "X-PAYMENT header is required" {
				t.Fatalf("status %d %s; want the ordinary 402", res.StatusCode, body)
			}
			if got := res.Header.Get(HeaderPassRefused); got != string(tc.want) {
				t.Errorf("%s = %q, want %q", HeaderPassRefused, got, tc.want)
			}
			if res.Header.Get(x402.HeaderPaymentRequired) == "" {
				t.Error("no PAYMENT-REQUIRED on the refusal's 402")
			}
			if up.calls.Load() != calls {
				t.Error("the upstream ran for a refused pass")
			}
		})
	}
	env.expectMoved(t, env.payer.Address, before, 1)
}

// TestPassConfigChecks: what New refuses about passes.
func TestPassConfigChecks(t *testing.T) {
	env := newTestEnv(t)
	for _, tc := range []struct {
		name   string
		pass   PassConfig
		option string
	}{
		{"a pass without a key", PassConfig{Duration: time.Hour}, "pass"},
		{"a short key", PassConfig{Duration: time.Hour, Keys: []string{"short"}}, "pass_key"},
		{"the same key twice", PassConfig{Duration: time.Hour, Keys: []string{testPassKey, testPassKey}}, "pass_key"},
		{"a negative duration", PassConfig{Duration: -time.Hour, Keys: []string{testPassKey}}, "pass"},
		{"a scope that is not a directory", PassConfig{Duration: time.Hour, Scope: "/premium", Keys: []string{testPassKey}}, "pass"},
		{"a scope with dot segments", PassConfig{Duration: time.Hour, Scope: "/a/../b/", Keys: []string{testPassKey}}, "pass"},
		{"a relative scope", PassConfig{Duration: time.Hour, Scope: "premium/", Keys: []string{testPassKey}}, "pass"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := env.config()
			cfg.Pass = tc.pass
			_, err := New(cfg, Options{Facilitator: env.engine, Registry: env.reg})
			ce, ok := err.(interface{ Unwrap() error })
			if err == nil || !ok || !strings.Contains(err.Error(), tc.option+":") {
				t.Fatalf("New: %v (%v), want a %s error", err, ce, tc.option)
			}
			if strings.Contains(err.Error(), testPassKey) {
				t.Error("the error quotes the key")
			}
		})
	}
}
