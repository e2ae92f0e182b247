package gate

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/x402"
)

// trickyResources are resource URLs whose JSON or whose header could go wrong when spliced:
// quotes, backslashes, what encoding/json escapes for HTML, U+2028, invalid UTF-8,
// %-escapes, unicode, IPv6 hosts, a long URL (not cached) and one too long for the header
// (the full build's 500), and URLs the gate refuses (the full build's 500 too).
var trickyResources = []string{
	"http://api.example.com/weather",
	"https://api.example.com/weather/today",
	`http://api.example.com/a"b"`,
	`http://api.example.com/back\slash`,
	"http://api.example.com/<script>alert(1)</script>&amp;",
	"http://api.example.com/caf\u00e9/\u00fcn\u00ef/\u65e5\u672c",
	"http://api.example.com/\u2028\u2029",
	"http://api.example.com/%22%3C%3E%26%E2%80%A8",
	"http://api.example.com/\xff\xfe",
	"http://api.example.com/emoji/\U0001F600",
	"http://api.example.com:8443/x?y=1&z=2#frag",
	"https://[::1]:8443/v6",
	"http://api.example.com/" + strings.Repeat("long/", 200),
	"http://api.example.com/" + strings.Repeat("x", 20_000),
	"http://api.example.com/ctl\x01",
	"http://api.example.com/del\x7f",
	"ftp://api.example.com/x",
	"http://user:secret@api.example.com/x",
	"/relative",
}

// answerOf is everything a client sees of one answer, and the Result the hook saw.
type answerOf struct {
	status int
	header http.Header
	body   string
	result Result
}

// serveOnce runs g.Serve for one request for resource and records the answer.
func serveOnce(t *testing.T, g *Gate, method, resource string, header http.Header) answerOf {
	t.Helper()
	var seen *Result
	g.onResult = func(r *Result) { seen = r }
	r := httptest.NewRequest(method, "http://api.example.com/ignored", nil)
	for k, v := range header {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	if err := g.Serve(w, r, Input{Resource: resource}, func(http.ResponseWriter, *http.Request) error {
		t.Fatal("the upstream ran for an unpaid request")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	a := answerOf{status: w.Code, header: w.Header(), body: w.Body.String()}
	if seen != nil {
		a.result = Result{Kind: seen.Kind, Status: seen.Status, Header: seen.Header, Body: seen.Body, Requirements: seen.Requirements}
	}
	return withoutNonce(a)
}

// cspNonce finds the paywall's CSP nonce, fresh on every page.
var cspNonce = regexp.MustCompile(`'nonce-([A-Za-z0-9_-]+)'`)

// withoutNonce writes the paywall's per-page CSP nonce as NONCE in a's header and bodies,
// so two builds of one page compare equal.
func withoutNonce(a answerOf) answerOf {
	m := cspNonce.FindStringSubmatch(a.header.Get("Content-Security-Policy"))
	if m == nil {
		return a
	}
	replace := func(h http.Header) http.Header {
		if h == nil {
			return nil
		}
		h = h.Clone()
		for k, vs := range h {
			for i, v := range vs {
				vs[i] = strings.ReplaceAll(v, m[1], "NONCE")
			}
			h[k] = vs
		}
		return h
	}
	a.header, a.result.Header = replace(a.header), replace(a.result.Header)
	a.body = strings.ReplaceAll(a.body, m[1], "NONCE")
	a.result.Body = []byte(strings.ReplaceAll(string(a.result.Body), m[1], "NONCE"))
	return a
}

// cachedAndFull builds the same route twice: once with its 402 template and once without.
func cachedAndFull(t *testing.T, cfg Config) (cached, full *Gate) {
	t.Helper()
	cached, full = newBenchGate(t, cfg), newBenchGate(t, cfg)
	if cached.challenges == nil {
		t.Fatal("the route's 402 is not cached")
	}
	full.challenges = nil
	return cached, full
}

func newBenchGate(t testing.TB, cfg Config) *Gate {
	t.Helper()
	f, err := httpapiClient()
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg, Options{Facilitator: f})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// permit2Beside3009 sells in DAI by Permit2 and in USDC by EIP-3009.
func permit2Beside3009() Config {
	cfg := benchConfig()
	dai := AssetConfig{Address: "0x3333333333333333333333333333333333333333", Decimals: 18, Symbol: "DAI"}
	cfg.Accepts = []AcceptConfig{{Asset: dai, Price: "0.01 DAI", Transfer: TransferPermit2}, {}}
	return cfg
}

// TestV1BodyListsOnlyWhatV1Pays: the v1 body of a 402, read by x402 v1 clients, lists only
// the ways a v1 client can pay (exact over EIP-3009), cached or built; the v2
// PAYMENT-REQUIRED lists every way. A route that only takes Permit2 lists none in v1.
func TestV1BodyListsOnlyWhatV1Pays(t *testing.T) {
	only := benchConfig()
	only.Asset, only.Price, only.Transfer = AssetConfig{Address: "0x3333333333333333333333333333333333333333", Decimals: 18, Symbol: "DAI"}, "0.01 DAI", TransferPermit2
	for _, tc := range []struct {
		name   string
		cfg    Config
		v1, v2 int
	}{
		{"Permit2 first, then EIP-3009", permit2Beside3009(), 1, 2},
		{"Permit2 only", only, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cached, full := cachedAndFull(t, tc.cfg)
			for _, g := range []*Gate{cached, full} {
				a := serveOnce(t, g, http.MethodGet, "http://api.example.com/weather", nil)
				var body struct {
					X402Version int `json:"x402Version"`
					Accepts     []struct {
						Scheme string         `json:"scheme"`
						Asset  string         `json:"asset"`
						Extra  map[string]any `json:"extra"`
					} `json:"accepts"`
				}
				if err := json.Unmarshal([]byte(a.body), &body); err != nil || body.X402Version != 1 || body.Accepts == nil {
					t.Fatalf("v1 body %s: %v", a.body, err)
				}
				for _, e := range body.Accepts {
					if e.Extra["assetTransferMethod"] == "permit2" || e.Scheme != "exact" {
						t.Errorf("the v1 body lists %+v, which no v1 client can pay", e)
					}
				}
				pr, err := x402.DecodePaymentRequired(a.header.Get(x402.HeaderPaymentRequired))
				if err != nil || len(body.Accepts) != tc.v1 || len(pr.Accepts) != tc.v2 {
					t.Fatalf("v1 lists %d, v2 %d (%v); want %d and %d", len(body.Accepts), len(pr.Accepts), err, tc.v1, tc.v2)
				}
			}
		})
	}
}

// TestCachedChallengeIsTheBuiltOne: for every route shape and many resource URLs, the
// cached 402 (first spliced, then from the LRU) is byte for byte the one the full build
// writes: status, every header, body, and the Result the OnResult hook sees.
func TestCachedChallengeIsTheBuiltOne(t *testing.T) {
	accepts := benchConfig()
	accepts.Accepts = []AcceptConfig{{Network: "base-sepolia", Price: "0.02 USDC"}, {Network: "base", PayTo: "0x2222222222222222222222222222222222222222"}}
	ext := benchConfig()
	ext.PaymentID = PaymentIDOptional
	ext.Discovery = &DiscoveryConfig{ServiceName: "Weather", Tags: []string{"weather", "forecast"},
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"temp":{"type":"number","description":"<b>°C</b> \u2028"}}}`)}
	quoted := benchConfig()
	quoted.Resource.Description = `a "quoted" <description> & more \ é`
	routes := map[string]Config{"one way to pay": benchConfig(), "three ways to pay": accepts, "extensions": ext, "quoted description": quoted,
		"a Permit2 way beside EIP-3009 (only the latter in the v1 body)": permit2Beside3009()}

	rng := rand.New(rand.NewPCG(1, 2))
	resources := append([]string(nil), trickyResources...)
	const alphabet = "aZ09-._~%/?#&=+;:@!$'()*,\"\\<>{}|^` \t\u00e9\u2028\U0001F600\xff"
	for range 300 {
		var b strings.Builder
		b.WriteString([]string{"http://", "https://"}[rng.IntN(2)] + "h.example/")
		rs := []rune(alphabet)
		for range rng.IntN(40) {
			if rng.IntN(10) == 0 {
				b.WriteByte(0xff)
				continue
			}
			b.WriteRune(rs[rng.IntN(len(rs))])
		}
		resources = append(resources, b.String())
	}

	for name, cfg := range routes {
		t.Run(name, func(t *testing.T) {
			// The odd URLs are for the splice's escaping: let them past the ambiguous-path
			// refusal (docs/gate.md#ambiguous-paths), which would answer most of them 400.
			cfg.Paths = PathsLenient
			cached, full := cachedAndFull(t, cfg)
			for _, res := range resources {
				want := serveOnce(t, full, http.MethodGet, res, nil)
				for round := range 2 { // spliced, then from the LRU
					if got := serveOnce(t, cached, http.MethodGet, res, nil); !reflect.DeepEqual(got, want) {
						t.Fatalf("%q (round %d):\n got %d %v\n%s\nwant %d %v\n%s", res, round, got.status, got.header, got.body, want.status, want.header, want.body)
					}
				}
			}
			// Most of the URLs are answered from the cache; the rest are refused or too long.
			if n := cached.challenges.answers.Len(); n < challengeCacheSize/2 || n > challengeCacheSize {
				t.Errorf("%d answers cached, want between %d and %d", n, challengeCacheSize/2, challengeCacheSize)
			}
		})
	}
}

// TestCachedChallengeTakesTheFullBuild: a HEAD, a browser, and a request that carries a
// payment header get what the full build gives them (no body, the paywall page, the
// payment's own answer); a per-request price is never taken from the cache.
func TestCachedChallengeTakesTheFullBuild(t *testing.T) {
	cached, full := cachedAndFull(t, benchConfig())
	const res = "http://api.example.com/weather"
	for _, c := range []struct {
		name   string
		method string
		header http.Header
	}{
		{"HEAD", http.MethodHead, nil},
		{"a browser gets the paywall", http.MethodGet, http.Header{"Accept": {"text/html"}, "User-Agent": {"Mozilla/5.0"}}},
		{"a malformed X-PAYMENT", http.MethodGet, http.Header{"X-Payment": {"bm90IGpzb24="}}},
		{"a malformed PAYMENT-SIGNATURE", http.MethodGet, http.Header{"Payment-Signature": {"%%%"}}},
		{"X-PAYMENT twice", http.MethodGet, http.Header{"X-Payment": {"a", "b"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := serveOnce(t, full, c.method, res, c.header)
			got := serveOnce(t, cached, c.method, res, c.header)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %d %v\n%s\nwant %d %v\n%s", got.status, got.header, got.body, want.status, want.header, want.body)
			}
			if c.method == http.MethodHead && got.body != "" {
				t.Errorf("HEAD got a body")
			}
		})
	}
	if r := cached.cachedChallenge(nil, Input{Resource: res, Price: "0.05 USDC"}); r != nil {
		t.Error("a per-request price was answered from the cache")
	}
	if r := cached.cachedChallenge(nil, Input{Resource: res, PayTo: "0x3333333333333333333333333333333333333333"}); r != nil {
		t.Error("a per-request payee was answered from the cache")
	}
	in := Input{Resource: res, Price: "0.05 USDC", Header: http.Header{}}
	if got, want := cached.Handle(context.Background(), in), full.Handle(context.Background(), in); !reflect.DeepEqual(got, want) {
		t.Errorf("per-request price: %s, want %s", got.Body, want.Body)
	}
}

// TestChallengeCacheIsBounded: a stream of distinct URLs keeps at most challengeCacheSize
// answers, and URLs longer than maxCachedResource are answered without being kept.
func TestChallengeCacheIsBounded(t *testing.T) {
	g := newBenchGate(t, benchConfig())
	for i := range 3 * challengeCacheSize {
		if g.cachedChallenge(nil, Input{Resource: fmt.Sprintf("http://api.example.com/%d", i)}) == nil {
			t.Fatal("no cached answer")
		}
	}
	if n := g.challenges.answers.Len(); n != challengeCacheSize {
		t.Errorf("%d answers kept, want %d", n, challengeCacheSize)
	}
	g.challenges.answers.Purge()
	long := "http://api.example.com/" + strings.Repeat("a", maxCachedResource)
	if g.cachedChallenge(nil, Input{Resource: long}) == nil || g.challenges.answers.Len() != 0 {
		t.Errorf("a %d-byte URL: %d answers kept", len(long), g.challenges.answers.Len())
	}
}

// TestCachedChallengeCostsTwoAllocations: an unpaid request for a URL whose answer is
// cached allocates two things, as Caddy's respond allocates its header values: the
// resource URL of the request and the response's own header values (one array). Its
// result, with the requirement and the header map, is the cached answer's.
func TestCachedChallengeCostsTwoAllocations(t *testing.T) {
	h := newBenchGate(t, benchConfig()).Middleware(MiddlewareOptions{})(http.NotFoundHandler())
	r := httptest.NewRequest(http.MethodGet, "http://api.example.com/weather/today", nil)
	w := &benchWriter{h: http.Header{}}
	serve := func() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
	serve()
	if n := testing.AllocsPerRun(100, serve); n > 2 || w.status != http.StatusPaymentRequired {
		t.Errorf("status %d, %.0f allocations per cached 402, want 2", w.status, n)
	}
}

// TestChallengeNotCached: routes whose 402 changes per request build it in full.
func TestChallengeNotCached(t *testing.T) {
	guardian := benchConfig()
	guardian.Verdict = &VerdictConfig{Advertise: AdvertiseOptional}
	perRequest := benchConfig()
	perRequest.Price, perRequest.PerRequestPrice, perRequest.PriceMin = "", true, "0.01 USDC"
	for name, cfg := range map[string]Config{"guardian advertised": guardian, "price per request": perRequest} {
		if g := newBenchGate(t, cfg); g.challenges != nil {
			t.Errorf("%s: the 402 is cached", name)
		}
	}
}
