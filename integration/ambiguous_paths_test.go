package integration_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/x402gate/x402gate/internal/testenv"
)

// ambiguousCaddyfile sells three routes of one site, each with passes under its own key:
// /api/pass/a/* for 0.01 USDC, and the dearer /api/pass/a/other/* and /api/pass/b/* for 0.05
// USDC; everything else is free. One site answers with the gate's default (strict) paths,
// the other, for the same public host, with `paths lenient` on /api/pass/a/*. Every route
// goes to one upstream that reads paths leniently.
const ambiguousCaddyfile = `{
	admin {$CADDY_ADMIN}
	auto_https off
	x402 {
		facilitator {
			` + testChainFacilitator + `
		}
	}
}

# route <directory> <price> <pass_key> <paths>: the directory sold with passes of an hour
(route) {
	handle {args[0]}* {
		x402 {
			price {args[1]}
			pay_to {$X402_PAY_TO}
			network base-sepolia
			pass 1h {args[0]}
			pass_key {args[2]}
			paths {args[3]}
		}
		reverse_proxy {$UPSTREAM}
	}
}

(routes) {
	import route /api/pass/a/other/ 0.05 {env.X402_PASS_KEY_OTHER} strict
	import route /api/pass/a/ 0.01 {env.X402_PASS_KEY_A} {args[0]}
	import route /api/pass/b/ 0.05 {env.X402_PASS_KEY_B} strict
	handle {
		reverse_proxy {$UPSTREAM}
	}
}

http://:{$STRICT_PORT} {
	bind 127.0.0.1
	import routes strict
}

http://:{$LENIENT_PORT} {
	bind 127.0.0.1
	import routes lenient
}
`

// whyPathSpellings are the spellings of issue 20's "Why" 7 (the first six) and more of their
// kind: Caddy's matchers send each to /api/pass/a/*, and a lenient upstream reads each as
// another path, most as /api/pass/b/doc or the dearer sibling /api/pass/a/other/doc.
var whyPathSpellings = map[string]string{
	"/api/pass/a/..;/b/doc":          "/api/pass/b/doc",
	"/api/pass/a/..%5Cb/doc":         "/api/pass/b/doc",
	"/api/pass/a/..%00/b/doc":        "/api/pass/b/doc",
	"/api/pass/a/%252e%252e/b/doc":   "/api/pass/b/doc",
	"/api/pass/a/other;/doc":         "/api/pass/a/other/doc",
	"/api/pass/a/other%5Cdoc":        "/api/pass/a/other/doc",
	"/api/pass/a/doc.":               "/api/pass/a/doc",
	"/api/pass/a/other%20/doc":       "/api/pass/a/other/doc",
	"/api/pass/a/..%255Cb/doc":       "/api/pass/b/doc",
	"/api/pass/a/other%0A/doc":       "/api/pass/a/other/doc",
	"/api/pass/a/..;jsessionid/b/do": "/api/pass/b/do",
}

// servedPath is how a backend such as Tomcat, IIS or one that decodes twice reads the
// escaped path it was sent: decoded twice, then lenientPath's reading (a backslash is a
// slash, ";params" cut, control characters, trailing dots and spaces dropped, dot segments
// resolved).
func servedPath(escaped string) string {
	p := escaped
	for range 2 {
		if d, err := url.PathUnescape(p); err == nil {
			p = d
		}
	}
	return lenientPath(p)
}

// lenientUpstream answers every request with the path it served, {"served": …}, and
// remembers it.
type lenientUpstream struct {
	srv    *httptest.Server
	mu     sync.Mutex
	served []string
}

func startLenientUpstream(t *testing.T) *lenientUpstream {
	u := &lenientUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := servedPath(r.URL.EscapedPath())
		u.mu.Lock()
		u.served = append(u.served, p)
		u.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]string{"served": p})
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *lenientUpstream) calls() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.served)
}

// servedOf is the path an upstream answer says it served.
func servedOf(body []byte) string {
	var b struct {
		Served string `json:"served"`
	}
	_ = json.Unmarshal(body, &b)
	return b.Served
}

func TestServedPath(t *testing.T) {
	for spelling, want := range whyPathSpellings {
		if got := servedPath(spelling); got != want {
			t.Errorf("servedPath(%q) = %q, want %q", spelling, got, want)
		}
	}
}

// TestAmbiguousPathsNeverServed: issue 20's "Why" 7 through the built binary. A payer buys a
// pass for /api/pass/a/ (0.01 USDC). With the gate's default paths, each spelling under
// /api/pass/a/ that the lenient upstream reads as /api/pass/b/doc or as the dearer
// /api/pass/a/other/doc is answered 400 ambiguous_path, with the pass and without it, and
// the upstream is never called; the plain path is served with the pass and is 402 without;
// a free route is served whatever its path. The same route with `paths lenient` shows the
// hazard: the pass lets each spelling in, and the upstream serves the other route.
func TestAmbiguousPathsNeverServed(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	payTo := testenv.NewAccount(t).Address
	up := startLenientUpstream(t)
	strictPort, lenientPort := testenv.FreePort(t), testenv.FreePort(t)
	testenv.StartCaddy(t, ambiguousCaddyfile, testenv.CaddyOptions{
		Env: []string{
			"X402_RPC_URL=" + chain.RPCURL, "X402_TOKEN=" + tok.Address.Hex(), "X402_PAY_TO=" + payTo.Hex(),
			"X402_FACILITATOR_KEY_FILE=" + writeKeyFile(t, chain.FacilitatorAccount()), "UPSTREAM=" + up.srv.URL,
			"X402_PASS_KEY_A=" + canary.passKey, "X402_PASS_KEY_B=" + canary.passKeyOld,
			"X402_PASS_KEY_OTHER=paths-test-pass-key-other-0123456789abcdef",
			"STRICT_PORT=" + strconv.Itoa(strictPort), "LENIENT_PORT=" + strconv.Itoa(lenientPort),
		},
		WaitPorts: []int{strictPort, lenientPort},
	})
	const host = "shop.example"
	strict, lenient := "http://127.0.0.1:"+strconv.Itoa(strictPort), "http://127.0.0.1:"+strconv.Itoa(lenientPort)
	payer := chain.Accounts[1]
	bal := balances(t, tok, payer.Address)

	header := signOnly(t, payV2Script, payer, strict+"/api/pass/a/doc", "X402_TOKEN="+tok.Address.Hex())
	paid := doHost(t, strict+"/api/pass/a/doc", host, map[string]string{"PAYMENT-SIGNATURE": header})
	pass := paid.Header.Get("X-402-PASS")
	if paid.Status != http.StatusOK || pass == "" || servedOf(paid.Body) != "/api/pass/a/doc" {
		t.Fatalf("paid /api/pass/a/doc: %d %s, a pass: %v", paid.Status, paid.Body, pass != "")
	}
	withPass := map[string]string{"X-402-PASS": pass}

	get := func(base, target string, header map[string]string) httpResult {
		t.Helper()
		h := map[string]string{"Host": host}
		for k, v := range header {
			h[k] = v
		}
		r, err := do(t, http.MethodGet, base+"/", target, h)
		if err != nil {
			t.Fatalf("GET %s: %v", target, err)
		}
		return r
	}
	t.Run("the plain path", func(t *testing.T) {
		if r := get(strict, "/api/pass/a/doc", withPass); r.Status != http.StatusOK || servedOf(r.Body) != "/api/pass/a/doc" {
			t.Errorf("with the pass: %d %s, want 200 from the upstream", r.Status, r.Body)
		}
		if r := get(strict, "/api/pass/a/doc", nil); r.Status != http.StatusPaymentRequired {
			t.Errorf("without the pass: %d %s, want 402", r.Status, r.Body)
		}
		if r := get(strict, "/api/pass/b/doc", withPass); r.Status != http.StatusPaymentRequired || r.Header.Get("X-402-PASS-REFUSED") != "pass_key_retired" {
			t.Errorf("/api/pass/b/doc with a's pass: %d, refused %q; want 402 pass_key_retired", r.Status, r.Header.Get("X-402-PASS-REFUSED"))
		}
	})
	t.Run("a free route is not affected", func(t *testing.T) {
		for _, target := range []string{"/free/doc", "/free/..;/doc", "/free/doc%5Cx"} {
			calls := up.calls()
			if r := get(strict, target, nil); r.Status != http.StatusOK || up.calls() != calls+1 {
				t.Errorf("GET %s: %d %s, want 200 from the upstream", target, r.Status, r.Body)
			}
		}
	})
	for target := range whyPathSpellings {
		t.Run(target, func(t *testing.T) {
			for what, h := range map[string]map[string]string{"without a pass": nil, "with a's pass": withPass} {
				calls := up.calls()
				r := get(strict, target, h)
				var body struct {
					Error string `json:"error"`
				}
				_ = json.Unmarshal(r.Body, &body)
				if r.Status != http.StatusBadRequest || body.Error != "ambiguous_path" || up.calls() != calls {
					t.Errorf("%s: %d %s, upstream calls %d; want 400 ambiguous_path and no upstream call", what, r.Status, r.Body, up.calls()-calls)
				}
			}
		})
	}
	t.Run("paths lenient lets the pass open other routes", func(t *testing.T) {
		for target, want := range whyPathSpellings {
			if !strings.HasPrefix(target, "/api/pass/a/..") && !strings.HasPrefix(target, "/api/pass/a/other") {
				continue
			}
			if r := get(lenient, target, withPass); r.Status != http.StatusOK || servedOf(r.Body) != want {
				t.Errorf("GET %s with a's pass: %d %s; want the hazard: 200 serving %s", target, r.Status, r.Body, want)
			}
		}
	})
	wantDelta(t, tok, payer.Address, bal[0], -price)
}
