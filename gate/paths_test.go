package gate

import (
	"net/http"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/x402"
)

// ambiguousSpellings are request targets under a pass's scope that a lenient upstream reads
// as another path (docs/gate.md#ambiguous-paths), with the rule each breaks.
var ambiguousSpellings = []string{
	"/premium/..;/secret/doc",            // ';' (Tomcat: /secret/doc)
	"/premium/a.html;jsessionid=1",       // ';'
	"/premium/..%5Csecret/doc",           // backslash, escaped (IIS: /secret/doc)
	`/premium/..\secret/doc`,             // backslash, raw
	"/premium/other%5Cdoc",               // backslash inside a segment
	"/premium/..%00/secret/doc",          // NUL
	"/premium/a.html%0A",                 // newline
	"/premium/a.html%09",                 // tab
	"/premium/%C2%85x",                   // C1 control (NEL)
	"/premium/%252e%252e/secret/doc",     // '%' left after decoding: a double escape
	"/premium/%25%35%63secret",           // '%' left after decoding
	"/premium/../secret.html",            // dot segment
	"/premium/./a.html",                  // dot segment
	"/premium/%2e%2e/secret.html",        // dot segment, escaped
	"/premium/a%2F..%2F..%2Fsecret.html", // dot segment behind escaped slashes
	"/premium/a.html.",                   // trailing dot (Windows)
	"/premium/dir./a.html",               // a segment that ends in a dot
	"/premium/a.html%20",                 // trailing space (Windows)
	"/premium/dir%20/a.html",             // a segment that ends in a space
	"/premium/%C0%AE%C0%AE/secret.html",  // overlong UTF-8 dots: not UTF-8
	"/premium/%FF.html",                  // not UTF-8
}

// plainSpellings are paths under the scope that no rule touches.
var plainSpellings = []string{
	"/premium/a.html",
	"/premium/",
	"/premium/v1.0/a.html",
	"/premium/.well-known/x",
	"/premium/my%20file.html",
	"/premium/caf%C3%A9.html",
	"/premium/a..b.html",
	"/premium/a.html?x=1;y=%25",
}

// getRaw sends GET target (the request line's path, as written) to srv with Host host and
// the header h.
func getRaw(t *testing.T, srv, target, host string, h http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = target
	for k, vs := range h {
		req.Header[k] = vs
	}
	req.Host = host
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	return res
}

// TestAmbiguousPathsRefused: a route with passes refuses each ambiguous spelling of a path
// in its scope with 400 ambiguous_path, before it looks at anything the request brings: a
// valid pass, a sign-in-with-x proof of its payer and a signed payment alike. The upstream is
// never called and nothing more moves on chain. Plain spellings go through with the pass.
// The same route with paths lenient lets the pass in on those spellings that still clean to
// its scope (the hazard), and a bare Handle refuses an ambiguous resource URL too.
func TestAmbiguousPathsRefused(t *testing.T) {
	env := newTestEnv(t)
	up := &upstream{}
	const host = "shop.example"
	g := env.gate(t, env.passConfig(testPassKey), Options{})
	strict := serve(t, g, up)
	lenientCfg := env.passConfig(testPassKey)
	lenientCfg.Paths = PathsLenient
	lenient := serve(t, env.gate(t, lenientCfg, Options{}), up)

	before := env.ledger(t, env.payer.Address)
	token, _ := env.payForPass(t, strict.URL+"/premium/a.html", host)
	c := readChallenge(t, getWith(t, strict.URL+"/premium/b.html", host, nil))
	payName, payValue := env.sign(t, x402.Version2, env.payer, c, tamper{})
	info, _ := siwxChallengeOf(t, getWith(t, strict.URL+"/premium/b.html", host, nil))
	proof := siwxProof(t, info, "eip155:84532", env.payer.Key, nil)

	brings := map[string]http.Header{
		"nothing":  nil,
		"a pass":   {HeaderPass: {token}},
		"a cookie": {"Cookie": {CookiePass + "=" + token}},
		"a proof":  {HeaderSignInWithX: {proof}},
		"payment":  {payName: {payValue}},
	}
	for _, target := range ambiguousSpellings {
		for what, h := range brings {
			calls := up.calls.Load()
			res := getRaw(t, strict.URL, target, host, h)
			body := readBody(t, res)
			if res.StatusCode != http.StatusBadRequest || errorOf(t, body) != string(ReasonAmbiguousPath) || up.calls.Load() != calls {
				t.Errorf("GET %s with %s: status %d %s, upstream calls %d; want 400 %s and no call", target, what, res.StatusCode, body, up.calls.Load()-calls, ReasonAmbiguousPath)
			}
		}
	}
	for _, target := range plainSpellings {
		res := getRaw(t, strict.URL, target, host, http.Header{HeaderPass: {token}})
		if body := readBody(t, res); res.StatusCode != http.StatusOK {
			t.Errorf("GET %s with the pass: status %d %s, want 200", target, res.StatusCode, body)
		}
	}
	lenientIn := 0
	for _, target := range ambiguousSpellings {
		res := getRaw(t, lenient.URL, target, host, http.Header{HeaderPass: {token}})
		body := readBody(t, res)
		switch res.StatusCode {
		case http.StatusOK:
			lenientIn++
		case http.StatusPaymentRequired:
		default:
			t.Errorf("paths lenient: GET %s with the pass: status %d %s, want 200 or 402", target, res.StatusCode, body)
		}
	}
	if lenientIn == 0 {
		t.Error("paths lenient let no ambiguous spelling in with the pass: the opt-out does nothing")
	}
	for _, resource := range []string{"http://" + host + "/premium/..;/secret/doc", "http://" + host + "/premium/%252e%252e/secret/doc"} {
		if res := g.Handle(t.Context(), Input{Resource: resource, Header: http.Header{}}); res.Status != http.StatusBadRequest || res.Reason != ReasonAmbiguousPath {
			t.Errorf("Handle(%s) = %d %s, want 400 %s", resource, res.Status, res.Reason, ReasonAmbiguousPath)
		}
	}
	env.expectMoved(t, env.payer.Address, before, 1)
}

// TestPathAmbiguity pins each rule on decoded paths.
func TestPathAmbiguity(t *testing.T) {
	for p, want := range map[string]string{
		"/a/b":           "",
		"/":              "",
		"":               "",
		"/a/.well-known": "",
		"/a/b.c/d":       "",
		"/a b/c":         "",
		"/café":          "",
		"/a/..;/b":       "a ';'",
		`/a\b`:           "a backslash",
		"/a\x00b":        "a control character",
		"/a\x7f":         "a control character",
		"/a\u0085":       "a control character",
		"/a/%2e%2e":      "a '%' left after decoding (a double escape)",
		"/a/..":          "a segment that ends in a dot or a space",
		"/a/./b":         "a segment that ends in a dot or a space",
		"/a./b":          "a segment that ends in a dot or a space",
		"/a /b":          "a segment that ends in a dot or a space",
		"/a\xc0\xae":     "bytes that are not UTF-8",
	} {
		if got := pathAmbiguity(p); got != want {
			t.Errorf("pathAmbiguity(%q) = %q, want %q", p, got, want)
		}
	}
	if got := resourceAmbiguity("http://shop.example./a.html"); got != "" {
		t.Errorf("a host with a trailing dot made the path ambiguous: %q", got)
	}
	if !strings.Contains(resourceAmbiguity("http://shop.example/a/%2e%2e/b"), "dot") {
		t.Error("an escaped dot segment in the resource URL was not found")
	}
}
